"""Gymnasium spaces -> rl2edge.specs' ObservationSpec and ActionSpec (the one place that imports gymnasium
for it); the checkpoint and the artifact write them with `to_json`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ObservationKey, ObservationSpec


def _bounds(arr: np.ndarray) -> list[Any]:
    # JSON has no infinity; null stands for an unbounded side.
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(arr, dtype=np.float64).ravel()]


def _unsupported(space: gym.Space, what: str) -> ConfigError:
    """The one-line refusal of a space rl2edge does not take (`what`: how the message names it), with the
    wrapper to use."""
    if isinstance(space, (gym.spaces.Text, gym.spaces.Graph, gym.spaces.Sequence)):
        todo = (
            "it has no fixed size for a network or a PLC; encode it as a fixed-size Box in the env "
            "(a gymnasium.ObservationWrapper)"
        )
    else:  # Tuple, Discrete, MultiDiscrete, MultiBinary: flattenable
        todo = "wrap the env in gymnasium.wrappers.FlattenObservation (a Box of its one-hot/flattened values)"
    return ConfigError(f"{what}: rl2edge policies take Box observations or a Dict of Box keys; {todo}")


def observation_spec(space: gym.Space, units: Mapping[str, str] | None = None) -> ObservationSpec:
    """`units`: a Dict env's units per key (its metadata's `observation_units`), written to the manifest."""
    if isinstance(space, gym.spaces.Dict):
        return _dict_spec(space, units or {})
    if not isinstance(space, gym.spaces.Box):
        raise _unsupported(space, f"observation space {space} is not supported")
    return ObservationSpec(
        tuple(space.shape),
        str(space.dtype),
        tuple(_bounds(space.low)),
        tuple(_bounds(space.high)),
        image_layout(tuple(space.shape)),
    )


def _dict_spec(space: gym.spaces.Dict, units: Mapping[str, str]) -> ObservationSpec:
    """Keys in the space's own order (Gymnasium sorts a plain dict's keys; an OrderedDict or a list of
    pairs keeps the order given): the order of the concatenation the network sees and of the artifact's
    inputs."""
    keys = []
    for name, sub in space.spaces.items():
        if not isinstance(sub, gym.spaces.Box):
            raise _unsupported(sub, f"Dict observation key {name!r} is {sub}")
        if len(sub.shape) == 3:
            image_layout(tuple(sub.shape))  # an image's channels: 1-4 first or last, else refused
        elif len(sub.shape) not in (1, 2):
            raise ConfigError(
                f"Dict observation key {name!r} has shape {tuple(sub.shape)}; keys are 1-D or 2-D Box values, "
                "or 3-D images (HWC or CHW, 1-4 channels)"
            )
        keys.append(
            ObservationKey(
                str(name),
                tuple(sub.shape),
                str(sub.dtype),
                tuple(_bounds(sub.low)),
                tuple(_bounds(sub.high)),
                units.get(name),
            )
        )
    unknown = sorted(set(units) - {k.name for k in keys})
    if unknown:
        raise ConfigError(f"observation_units name keys {unknown} that the Dict observation does not have")
    return ObservationSpec.of_keys(keys)


def flat_space(spec: ObservationSpec) -> gym.spaces.Box:
    """The Box the network sees for a Dict observation: its keys' values, concatenated."""
    low = np.array([-np.inf if v is None else v for v in spec.low], np.float32)
    high = np.array([np.inf if v is None else v for v in spec.high], np.float32)
    return gym.spaces.Box(low, high, dtype=np.float32)


class FlatDictObservation(gym.ObservationWrapper):
    """A Dict-observation env as training sees it: one float32 vector, keys in the space's order (the
    spec's `flatten`, the same function the export and the runtime use)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.spec_of_keys = observation_spec(env.observation_space, env.metadata.get("observation_units"))
        self.observation_space = flat_space(self.spec_of_keys)

    def observation(self, observation: Any) -> np.ndarray:
        return self.spec_of_keys.flatten(observation).astype(np.float32)


IMAGE_KEY = "image"
"""The one key an image Box outside a Dict is to the network (its encoder's name for the frame)."""


def network_view(spec: ObservationSpec) -> ObservationSpec:
    """The observation as the network sees it: a Box of two or more axes that is not an image flattened
    row-major (SB3's FlattenExtractor); an image Box (HWC or CHW) a Dict of one image key, which gets the
    Nature-CNN as SB3's CnnPolicy gives it one (its values flat in the env's own order, as an image key
    travels); anything else as it is. The checkpoint, the manifest and the node map keep the env's shape;
    the PLC gives a matrix's values as one flat array in that (C) order."""
    if spec.is_matrix:
        return ObservationSpec((spec.size,), spec.dtype, spec.low, spec.high, "flat")
    if not spec.is_dict and spec.layout != "flat":
        return ObservationSpec.of_keys(
            [ObservationKey(IMAGE_KEY, spec.shape, spec.dtype, spec.low, spec.high)]
        )
    return spec


class FlatBoxObservation(gym.ObservationWrapper):
    """A Box observation of two or more axes (a matrix, or an image outside a Dict) as training sees it: one
    float32 vector, row-major; `spec_of_box` keeps the env's own shape for the checkpoint and the artifact."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.spec_of_box = observation_spec(env.observation_space)
        self.observation_space = flat_space(network_view(self.spec_of_box))

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, np.float32).reshape(-1)


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
    if isinstance(space, gym.spaces.MultiDiscrete):
        if len(space.nvec.shape) != 1 or space.nvec.min() < 2:
            raise ConfigError(
                f"action space {space} is not supported: a MultiDiscrete action must be 1-D with 2 or more "
                "choices per component (flatten a 2-D nvec in the env)"
            )
        return ActionSpec.multi(space.nvec, getattr(space, "start", None))
    if isinstance(space, gym.spaces.MultiBinary):
        if len(space.shape) != 1:
            raise ConfigError(f"action space {space} is not supported: a MultiBinary action must be 1-D")
        return ActionSpec.multi([2] * int(space.shape[0]), binary=True)
    raise ConfigError(
        f"action space {space} is not supported: use Discrete, MultiDiscrete, MultiBinary or a bounded 1-D Box"
    )
