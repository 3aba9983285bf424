"""The action transform between a policy's output and the env: one formula, used in training,
evaluation, and (as constants folded into the graph) deployment.

Box: env_action = center + clip(a, -1, 1) * half_range, in float32. Discrete: env_action = index + start.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ActionTransform:
    def __init__(self, spec: dict[str, Any]):
        self.discrete = spec["type"] == "discrete"
        if self.discrete:
            self.start = int(spec.get("start", 0))
        else:
            low = np.asarray(spec["low"], np.float64)
            high = np.asarray(spec["high"], np.float64)
            self.center = ((high + low) / 2).astype(np.float32)
            self.half_range = ((high - low) / 2).astype(np.float32)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        if self.discrete:
            return np.asarray(action, np.int64) + self.start
        a = np.clip(np.asarray(action, np.float32), np.float32(-1), np.float32(1))
        return (self.center + a * self.half_range).astype(np.float32)
