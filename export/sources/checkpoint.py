"""An rl2edge run directory (checkpoint.json and its weights, train.core.checkpoint) as an export source.
Checks the checkpoint against its algorithm's row (train.algos) and hands it to its framework's module:
export.sources.checkpoint_torch or export.sources.checkpoint_tf (which never loads torch)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl2edge.errors import CheckpointError
from rl2edge.export.source import ExportSource
from rl2edge.train import algos
from rl2edge.train.core.checkpoint import Checkpoint, load_checkpoint

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions

FRAMEWORK_MODULES = {
    "torch": "rl2edge.export.sources.checkpoint_torch",
    "tf": "rl2edge.export.sources.checkpoint_tf",
}
"""Each framework's checkpoint source: a module with `source(ckpt, agent, description)`."""


def from_path(path: Path, options: SourceOptions) -> ExportSource:
    """export.sources' entry point: a run directory takes no options (it knows its env)."""
    return source_from_checkpoint(path)


def source_from_checkpoint(run_dir: Path) -> ExportSource:
    ckpt = load_checkpoint(run_dir)
    row = algos.get(ckpt.algo, in_checkpoint=True)
    if ckpt.framework not in row.agents or ckpt.framework not in FRAMEWORK_MODULES:
        raise CheckpointError(f"unknown framework {ckpt.framework!r} for {ckpt.algo} in {ckpt.path}")
    if ckpt.network.type != row.network:
        raise CheckpointError(
            f"{ckpt.path}: network type {ckpt.network.type!r} is not {ckpt.algo}'s ({row.network!r}); "
            "the checkpoint was edited or written by another tool"
        )
    # each framework's modules load only for its checkpoints: TF's never loads torch
    module = importlib.import_module(FRAMEWORK_MODULES[ckpt.framework])
    source: ExportSource = module.source(ckpt, row.agent_class(ckpt.framework), description(ckpt))
    return source


def description(ckpt: Checkpoint) -> dict[str, Any]:
    """The manifest's `source` section."""
    out: dict[str, Any] = {
        "kind": "rl2edge-checkpoint",
        "checkpoint": str(ckpt.path),
        "checkpoint_sha256": ckpt.content_hash(),
        "algo": ckpt.algo,
        "framework": ckpt.framework,
        "env_id": ckpt.env_id,
        "seed": ckpt.seed,
        "total_timesteps": ckpt.total_timesteps,
    }
    if ckpt.network.noisy:
        out["noisy_layers"] = (
            "exported with their mean weights (mu); sigma and the noise are for exploration in training only"
        )
    return out
