"""What an export starts from: an rl2edge checkpoint, or a Stable-Baselines3 model (.zip) with its
VecNormalize statistics. Either way: the deployable torch policy, its normalizer, the I/O specs, what
the manifest says about the source, and the reference the exported files are checked against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export.deployable import DeployablePolicy, build_deployable
from train.core.checkpoint import load_checkpoint
from train.core.normalization import RunningNormalizer


@dataclass
class ExportSource:
    env_id: str
    observation_space: dict[str, Any]
    action_space: dict[str, Any]
    policy: DeployablePolicy
    norm: RunningNormalizer
    description: dict[str, Any]
    """The manifest's `source` section."""
    reference_name: str
    """How the report names what exported files are compared with."""
    reference: Callable[[np.ndarray], np.ndarray] | None = None
    """Raw observations [N, ...] -> the source's own actions [N, ...]; None: the deployable torch policy."""

    @property
    def head(self) -> str:
        return self.policy.head

    def reference_actions(self, obs: np.ndarray) -> np.ndarray:
        if self.reference is not None:
            return np.asarray(self.reference(obs))
        with torch.no_grad():
            return self.policy(torch.as_tensor(obs)).numpy()

    def margins(self, obs: np.ndarray) -> np.ndarray | None:
        """Discrete: the gap between the top two logits/Q-values (near ties may flip in any conversion)."""
        if not self.policy.discrete:
            return None
        with torch.no_grad():
            top2 = torch.topk(self.policy.pre_head(torch.as_tensor(obs)), 2, dim=-1).values
        return (top2[:, 0] - top2[:, 1]).numpy()


def source_from_checkpoint(run_dir: Path) -> ExportSource:
    ckpt = load_checkpoint(run_dir)
    policy, norm = build_deployable(ckpt)
    meta = ckpt.meta
    return ExportSource(
        env_id=ckpt.env_id,
        observation_space=meta["observation_space"],
        action_space=meta["action_space"],
        policy=policy,
        norm=norm,
        description={
            "kind": "rl2edge-checkpoint",
            "checkpoint": str(ckpt.path),
            "checkpoint_sha256": ckpt.content_hash(),
            "algo": ckpt.algo,
            "framework": ckpt.framework,
            "env_id": ckpt.env_id,
            "seed": meta.get("seed"),
            "total_timesteps": meta.get("total_timesteps"),
        },
        reference_name=f"source ({ckpt.framework})",
    )
