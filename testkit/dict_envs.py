"""Gymnasium envs with Dict observations for the tests, importable by name (`testkit.dict_envs:DictCartPole`).

Their keys are declared out of alphabetical order (a list of pairs keeps it), so that a test sees the
declared order kept where a sorted one would differ."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from gymnasium.wrappers import TimeLimit


class _KeyedEnv(gym.Wrapper):
    """A Box env observed as a Dict: `_keys` splits each observation into the keys."""

    @staticmethod
    def _keys(obs: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def reset(self, **kwargs: Any) -> Any:
        obs, info = self.env.reset(**kwargs)
        return self._keys(obs), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._keys(obs), reward, terminated, truncated, info


class DictCartPole(_KeyedEnv):
    """CartPole (Discrete actions, 200 steps) observed as {"pole": [angle, angular velocity],
    "cart": [position, velocity]}."""

    metadata = {"render_modes": [], "observation_units": {"pole": "rad, rad/s", "cart": "m, m/s"}}  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__(TimeLimit(CartPoleEnv(), 200))
        box = self.env.observation_space
        self.observation_space = gym.spaces.Dict(
            [
                ("pole", gym.spaces.Box(box.low[2:], box.high[2:], dtype=np.float32)),
                ("cart", gym.spaces.Box(box.low[:2], box.high[:2], dtype=np.float32)),
            ]
        )

    @staticmethod
    def _keys(obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"pole": obs[2:].astype(np.float32), "cart": obs[:2].astype(np.float32)}


class DictPendulum(_KeyedEnv):
    """Pendulum (a Box torque, 200 steps) observed as {"rate": [angular velocity], "angle": [cos, sin]}."""

    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(self) -> None:
        super().__init__(TimeLimit(PendulumEnv(), 200))
        self.observation_space = gym.spaces.Dict(
            [
                ("rate", gym.spaces.Box(-8.0, 8.0, (1,), np.float32)),
                ("angle", gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
            ]
        )

    @staticmethod
    def _keys(obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"rate": obs[2:].astype(np.float32), "angle": obs[:2].astype(np.float32)}
