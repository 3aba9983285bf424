"""Frame stacking (the Zoo's `frame_stack: K`) with Stable-Baselines3's convention (VecFrameStack on a flat
observation): the policy sees its last K observations concatenated, oldest first, the newest in the last
slot; at an episode's start the K-1 older slots are zeros.

Training wraps each env in `StackedObservation`; the exported graph takes one observation per call and
keeps the K-1 previous ones as its state (export: `frames` in, `frames_out` out, zeroed by
`episode_start`), so the PLC sends one observation per cycle, never the history. `FrameStacker` is the
same stack on the acting side (evaluation during training), tested against the wrapper.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ObservationSpec


def check_stackable(spec: ObservationSpec, k: int) -> None:
    if k > 1 and (spec.is_dict or spec.layout != "flat" or len(spec.shape) != 1):
        raise ConfigError(
            f"frame_stack {k}: stacking is implemented for flat Box observations; this one is "
            f"{'a Dict' if spec.is_dict else list(spec.shape)}; a recurrent policy keeps a memory of any observation"
        )


def stacked_spec(spec: ObservationSpec, k: int) -> ObservationSpec:
    """The observation the network sees: K copies of `spec`'s values and bounds, oldest first."""
    if k == 1:
        return spec
    data = spec.to_json()
    data["shape"] = [spec.size * k]
    for side in ("low", "high"):
        if data.get(side) is not None:
            data[side] = list(data[side]) * k
    return ObservationSpec.from_json(data)


class StackedObservation(gym.ObservationWrapper):
    """An env whose observation is its last K, concatenated oldest first (zeros before an episode's first)."""

    def __init__(self, env: gym.Env, k: int):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"frame_stack {k}: stacking takes a flat Box observation, not {space}")
        self.k, self.dim = k, int(space.shape[0])
        self.observation_space = gym.spaces.Box(
            np.tile(space.low, k), np.tile(space.high, k), dtype=np.float32
        )
        self._stack = np.zeros(self.k * self.dim, np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._stack[:] = 0.0
        return self.observation(obs), info

    def observation(self, observation: Any) -> np.ndarray:
        self._stack[: -self.dim] = self._stack[self.dim :]
        self._stack[-self.dim :] = np.asarray(observation, np.float32).reshape(-1)
        return self._stack.copy()


class FrameStacker:
    """The same stack for an act function on raw observations: `reset()` at each episode's start."""

    def __init__(self, k: int, dim: int):
        self.k, self.dim = k, dim
        self.stack = np.zeros(k * dim, np.float32)

    def reset(self) -> None:
        self.stack[:] = 0.0

    def __call__(self, observation: Any) -> np.ndarray:
        self.stack[: -self.dim] = self.stack[self.dim :]
        self.stack[-self.dim :] = np.asarray(observation, np.float32).reshape(-1)
        return self.stack.copy()
