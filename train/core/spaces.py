"""Gymnasium spaces -> rl2edge.specs' ObservationSpec and ActionSpec (the one place that imports gymnasium
for it); the checkpoint and the artifact write them with `to_json`."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ObservationSpec


def _bounds(arr: np.ndarray) -> list[Any]:
    # JSON has no infinity; null stands for an unbounded side.
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(arr, dtype=np.float64).ravel()]


def observation_spec(space: gym.Space) -> ObservationSpec:
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(
            f"observation space {space} is not supported: rl2edge policies take Box observations "
            "(flatten Dict/Tuple observations with gymnasium.wrappers.FlattenObservation)"
        )
    return ObservationSpec(
        tuple(space.shape),
        str(space.dtype),
        tuple(_bounds(space.low)),
        tuple(_bounds(space.high)),
        image_layout(tuple(space.shape)),
    )


def image_layout(shape: tuple[int, ...]) -> str:
    """'HWC' or 'CHW' for image observations (channels: the small axis of 1-4), else 'flat'."""
    if len(shape) != 3:
        return "flat"
    if shape[-1] <= 4 < shape[0]:
        return "HWC"
    if shape[0] <= 4 < shape[-1]:
        return "CHW"
    raise ConfigError(f"observation shape {shape} is 3-D but neither HWC nor CHW with 1-4 channels")


def action_spec(space: gym.Space) -> ActionSpec:
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpec("discrete", n=int(space.n), start=int(space.start))
    if isinstance(space, gym.spaces.Box):
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ConfigError(f"action space {space} has infinite bounds; rl2edge needs bounded Box actions")
        if len(space.shape) != 1:
            raise ConfigError(f"action space {space} must be one-dimensional")
        return ActionSpec(
            "box",
            shape=tuple(space.shape),
            dtype=str(space.dtype),
            low=tuple(_bounds(space.low)),
            high=tuple(_bounds(space.high)),
        )
    raise ConfigError(f"action space {space} is not supported: use Discrete or a bounded 1-D Box")
