"""The checkpoint contract (train -> export): a directory with `checkpoint.json` and the weights file.

No pickle anywhere: the JSON holds everything but the tensors, the tensors are safetensors (torch) or
a Keras weights file (tf). Nothing time-dependent goes into checkpoint.json, so the same seed gives the
same checkpoint bit for bit; wall-clock figures go to `summary.json` beside it.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl2edge.errors import CheckpointError
from rl2edge.fileio import read_json_document, sha256_file, write_json_atomic
from rl2edge.specs import ActionSpec, ObservationSpec, StateTensor, frame_stack_state
from rl2edge.tables import package_versions
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer

CHECKPOINT_FILE = "checkpoint.json"
FORMAT = "rl2edge-checkpoint"
FORMAT_VERSION = 1


def library_versions(*names: str) -> dict[str, str]:
    return {
        "python": platform.python_version(),
        **package_versions(("rl2edge", "numpy", "gymnasium", *names), missing="not installed"),
    }


@dataclass(frozen=True)
class Checkpoint:
    """A run directory's checkpoint.json, parsed once (`load_checkpoint`): the specs as types."""

    path: Path
    algo: str
    framework: str
    env_id: str
    observation: ObservationSpec
    action: ActionSpec
    network: NetworkSpec
    normalization: dict[str, Any]
    """The normalizer's statistics as training wrote them (`normalizer()` builds it)."""
    weights_file: str
    seed: int | None = None
    total_timesteps: int | None = None
    hyperparameters: dict[str, Any] | None = None
    world_size: int = 1
    """The processes of the data-parallel job that trained it (train.data_parallel); 1 before issue 47."""
    versions: dict[str, str] | None = None
    """The libraries it was trained with (library_versions)."""

    def to_json(self) -> dict[str, Any]:
        """checkpoint.json as `write_checkpoint` writes it and `load_checkpoint` reads it back: one definition
        of the contract. The weights' sha256 is taken from the file in place."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "algo": self.algo,
            "framework": self.framework,
            "env_id": self.env_id,
            "seed": self.seed,
            "total_timesteps": self.total_timesteps,
            "world_size": self.world_size,
            "observation_space": self.observation.to_json(),
            "action_space": self.action.to_json(),
            "network": self.network.to_json(),
            "hyperparameters": self.hyperparameters,
            "normalization": self.normalization,
            "versions": self.versions,
            "weights": {"file": self.weights_file, "sha256": sha256_file(self.weights_path)},
        }

    @property
    def weights_path(self) -> Path:
        return self.path / self.weights_file

    @property
    def frame_stack(self) -> int:
        """K > 1: the network takes the last K observations (train.core.frame_stack)."""
        return self.network.frame_stack

    @property
    def state(self) -> list[StateTensor]:
        """The policy's own state tensors: a recurrent actor's; a frame stack's older observations."""
        if self.frame_stack > 1:
            return [frame_stack_state(self.observation.size, self.frame_stack)]
        return self.network.state

    def normalizer(self) -> RunningNormalizer:
        """The normalizer as training applied it: over K observations for a frame stack, pixels left raw."""
        from rl2edge.train.core.encoder_spec import checkpoint_normalizer
        from rl2edge.train.core.frame_stack import stacked_spec

        return checkpoint_normalizer(stacked_spec(self.observation, self.frame_stack), self.normalization)

    def content_hash(self) -> str:
        """sha256 of checkpoint.json: it names the weights' sha256, so it covers the whole checkpoint."""
        return sha256_file(self.path / CHECKPOINT_FILE)


def write_checkpoint(ckpt: Checkpoint) -> None:
    """Write checkpoint.json last (atomically), after the weights file is in place."""
    if not ckpt.weights_path.is_file():
        raise CheckpointError(f"weights file {ckpt.weights_path} was not written")
    write_json_atomic(ckpt.path / CHECKPOINT_FILE, ckpt.to_json())


_REQUIRED = (
    "algo",
    "framework",
    "env_id",
    "observation_space",
    "action_space",
    "network",
    "normalization",
    "weights",
)


def load_checkpoint(run_dir: str | Path) -> Checkpoint:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(
            f"checkpoint directory {run_dir} does not exist; pass the --out directory of `rl2edge train`"
        )
    meta_path = run_dir / CHECKPOINT_FILE
    if not meta_path.is_file():
        raise CheckpointError(f"{run_dir} holds no {CHECKPOINT_FILE}; is it a finished `rl2edge train` run?")
    meta = read_json_document(
        meta_path,
        what="checkpoint",
        kind=("format", FORMAT),
        version=("format_version", FORMAT_VERSION),
        required=_REQUIRED,
        error=CheckpointError,
        fix="the checkpoint is corrupted or from another rl2edge; train again",
    )
    try:
        ckpt = Checkpoint(
            run_dir,
            str(meta["algo"]),
            str(meta["framework"]),
            str(meta["env_id"]),
            ObservationSpec.from_json(meta["observation_space"]),
            ActionSpec.from_json(meta["action_space"]),
            NetworkSpec.from_json(meta["network"]),
            dict(meta["normalization"]),
            str(meta["weights"]["file"]),
            meta.get("seed"),
            meta.get("total_timesteps"),
            meta.get("hyperparameters"),
            int(meta.get("world_size", 1)),
            meta.get("versions"),
        )
    except CheckpointError as exc:
        raise CheckpointError(f"{meta_path}: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{meta_path} is incomplete or mistyped ({exc!r}); train again") from None
    weights = ckpt.weights_path
    if not weights.is_file():
        raise CheckpointError(f"weights file {weights} is missing; the checkpoint is incomplete")
    if sha256_file(weights) != meta["weights"]["sha256"]:
        raise CheckpointError(
            f"weights file {weights} does not match the sha256 in {CHECKPOINT_FILE}; it is corrupted"
        )
    return ckpt
