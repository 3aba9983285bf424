"""A torch checkpoint's export source: the deployable network built by its algorithm's agent class
(`deployable_actor`), on the torch route (export.torch_graph); a frame stack's older observations become
the graph's state (export.stateful)."""

from __future__ import annotations

from typing import Any

from rl2edge.export.deployable import build_deployable
from rl2edge.export.torch_graph import TorchSource
from rl2edge.train.core.checkpoint import Checkpoint


def source(ckpt: Checkpoint, agent: Any, description: dict[str, Any]) -> TorchSource:
    policy, norm = build_deployable(ckpt, agent)
    stacked = None
    if ckpt.frame_stack > 1:  # served one observation per call, the K-1 older ones the graph's state
        from rl2edge.export.stateful import FrameStackPolicy

        stacked = FrameStackPolicy(policy, ckpt.observation.size, ckpt.frame_stack).eval()
    return TorchSource(
        ckpt.env_id,
        ckpt.observation,
        ckpt.action,
        norm,
        policy.head,
        description,
        f"source ({ckpt.framework})",
        algo=ckpt.algo,
        policy_distribution=agent.policy_distribution,
        policy=policy,
        stateful_graph=stacked,
        flat_frames=ckpt.observation.is_image,
    )
