"""Plants that register themselves on import, as third-party packages do (highway-env registers
`highway-fast-v0` when `highway_env` is imported): `--env testkit.registered_envs:MatrixCartPole-v0` is
Gymnasium's `module:Env-v0` form. Nothing is registered until this module is imported.

The observations are 2-D matrices, the shape of highway-env's Kinematics (vehicles x features): a row per
time step, the newest first, so the policy sees a short history it can use."""

from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

ROWS = 5


class MatrixObservation(gym.ObservationWrapper):
    """The last `ROWS` observations of the wrapped env as the rows of a (ROWS, ROWS) float32 Box, newest
    first. A row is the observation's values, zeros up to the last column, and a presence flag in the
    last column (1 for a step seen, 0 for the rows before the episode's start), as Kinematics' `presence`."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        n = int(np.prod(env.observation_space.shape))
        if n > ROWS - 1:
            raise ValueError(f"{env} has {n} observation values; MatrixObservation takes up to {ROWS - 1}")
        low, high = np.full(ROWS, -1.0, np.float32), np.full(ROWS, 1.0, np.float32)
        low[:n], high[:n] = env.observation_space.low, env.observation_space.high
        low[-1], high[-1] = 0.0, 1.0
        self.observation_space = gym.spaces.Box(
            np.tile(low, (ROWS, 1)), np.tile(high, (ROWS, 1)), dtype=np.float32
        )
        self._rows: deque[np.ndarray] = deque(maxlen=ROWS)
        self._n = n

    def reset(self, **kwargs: Any) -> Any:
        self._rows.clear()
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> np.ndarray:
        row = np.zeros(ROWS, np.float32)
        row[: self._n] = np.asarray(observation, np.float32).reshape(-1)
        row[-1] = 1.0
        self._rows.appendleft(row)
        out = np.zeros((ROWS, ROWS), np.float32)
        out[: len(self._rows)] = np.stack(self._rows)
        return out


def matrix_cartpole(**kwargs: Any) -> gym.Env:
    return MatrixObservation(gym.make("CartPole-v1", **kwargs))


def matrix_pendulum(**kwargs: Any) -> gym.Env:
    return MatrixObservation(gym.make("Pendulum-v1", **kwargs))


def _register(env_id: str, entry_point: str, max_episode_steps: int) -> None:
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point, max_episode_steps=max_episode_steps)


_register("RegCartPole-v0", "gymnasium.envs.classic_control.cartpole:CartPoleEnv", 200)
_register("MatrixCartPole-v0", f"{__name__}:matrix_cartpole", 500)
_register("MatrixPendulum-v0", f"{__name__}:matrix_pendulum", 200)


# ---- spaces rl2edge does not take, each a plant a user could bring (`testkit.registered_envs:TupleSensors`)
class _Still(gym.Env):
    """Steps of no consequence: these envs are refused before any step is taken."""

    action_space: gym.Space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, True, {}


class TupleSensors(_Still):
    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)))


class TextLog(_Still):
    observation_space = gym.spaces.Text(16)


class TinyCamera(_Still):
    """A camera frame outside a Dict smaller than the Nature-CNN's 36x36."""

    observation_space = gym.spaces.Box(0, 255, (16, 16, 3), np.uint8)


class DictWithDiscreteKey(_Still):
    observation_space = gym.spaces.Dict({"mode": gym.spaces.Discrete(3), "level": gym.spaces.Box(0, 1, (1,))})
