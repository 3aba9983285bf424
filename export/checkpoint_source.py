"""An rl2edge checkpoint as an export source: the torch route (export.deployable) or the TF route
(export.tf_source) by the checkpoint's framework, the deployable network built by its algorithm's agent
class (train.algos' row of the checkpoint's `algo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl2edge.errors import CheckpointError
from rl2edge.export.source import ExportSource, TorchSource
from rl2edge.specs import ActionSpec, ObservationSpec
from rl2edge.train import algos
from rl2edge.train.core.checkpoint import Checkpoint, load_checkpoint


def source_from_checkpoint(run_dir: Path) -> ExportSource:
    ckpt = load_checkpoint(run_dir)
    row = algos.get(ckpt.algo, in_checkpoint=True)
    if ckpt.framework not in row.agents:
        raise CheckpointError(f"unknown framework {ckpt.framework!r} for {ckpt.algo} in {ckpt.path}")
    network_type = (ckpt.meta.get("network") or {}).get("type")
    if network_type != row.network:
        raise CheckpointError(
            f"{ckpt.path}: network type {network_type!r} is not {ckpt.algo}'s ({row.network!r}); "
            "the checkpoint was edited or written by another tool"
        )
    agent = row.agent_class(ckpt.framework)
    if ckpt.framework == "tf":  # each route's modules load only for its checkpoints: TF's never loads torch
        from rl2edge.export.tf_source import tf_source

        return tf_source(ckpt, agent, _description(ckpt))
    from rl2edge.export.deployable import build_deployable

    policy, norm = build_deployable(ckpt, agent)
    observation = ObservationSpec.from_json(ckpt.meta["observation_space"])
    k = int(ckpt.meta["network"].get("frame_stack", 1))
    stacked = None
    if k > 1:  # served one observation per call, the K-1 older ones the graph's state
        from rl2edge.export.stateful import FrameStackPolicy

        stacked = FrameStackPolicy(policy, observation.size, k).eval()
    return TorchSource(
        ckpt.env_id,
        observation,
        ActionSpec.from_json(ckpt.meta["action_space"]),
        norm,
        policy.head,
        _description(ckpt),
        f"source ({ckpt.framework})",
        algo=ckpt.algo,
        policy_distribution=agent.policy_distribution,
        policy=policy,
        stateful_graph=stacked,
    )


def _description(ckpt: Checkpoint) -> dict[str, Any]:
    """The manifest's `source` section."""
    meta = ckpt.meta
    description = {
        "kind": "rl2edge-checkpoint",
        "checkpoint": str(ckpt.path),
        "checkpoint_sha256": ckpt.content_hash(),
        "algo": ckpt.algo,
        "framework": ckpt.framework,
        "env_id": ckpt.env_id,
        "seed": meta.get("seed"),
        "total_timesteps": meta.get("total_timesteps"),
    }
    if meta.get("network", {}).get("noisy"):
        description["noisy_layers"] = (
            "exported with their mean weights (mu); sigma and the noise are for exploration in training only"
        )
    return description
