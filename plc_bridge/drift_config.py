"""serve's drift monitor settings (`--drift-threshold`, `--drift-window`), apart from the monitor itself
(plc_bridge.drift) so that the command line is built without numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rl2edge.errors import ConfigError

DEFAULT_WINDOW = 1000
"""Observations per window: several episodes of a plant with episodes (a window inside one trajectory sees
that trajectory's own course, not the plant's state). Unshifted, it raised no alarm in 981 windows
(benchmarks/results/recorder.md)."""
DEFAULT_EVERY = 50
"""Cycles between two scores of the window."""
DEFAULT_THRESHOLD = 1.0
"""A window mean more than one reference standard deviation from the reference mean, in some dimension
(plc_bridge.drift says what the reference is)."""


@dataclass(frozen=True)
class DriftConfig:
    window: int = DEFAULT_WINDOW
    every: int = DEFAULT_EVERY
    threshold: float = DEFAULT_THRESHOLD

    def check(self) -> None:
        if self.window < 2 or self.every < 1:
            raise ConfigError(f"--drift-window must be at least 2 observations, got {self.window}")
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise ConfigError(
                f"--drift-threshold must be a positive number of standard deviations, got {self.threshold}"
            )
