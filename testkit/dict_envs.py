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


class CameraCartPole(_KeyedEnv):
    """CartPole (Discrete actions, 200 steps) observed by a camera and an encoder: {"camera": a 36x36x1
    uint8 frame (channel-last, as a camera gives it) showing the pole as a bright line from the cart,
    "cart": [position, velocity]}. 36x36 is the smallest frame SB3's Nature-CNN takes."""

    metadata = {"render_modes": [], "observation_units": {"cart": "m, m/s"}}  # noqa: RUF012
    SIZE = 36

    def __init__(self) -> None:
        super().__init__(TimeLimit(CartPoleEnv(), 200))
        box = self.env.observation_space
        self.observation_space = gym.spaces.Dict(
            [
                ("camera", gym.spaces.Box(0, 255, (self.SIZE, self.SIZE, 1), np.uint8)),
                ("cart", gym.spaces.Box(box.low[:2], box.high[:2], dtype=np.float32)),
            ]
        )

    @classmethod
    def _keys(cls, obs: np.ndarray) -> dict[str, np.ndarray]:
        frame = np.zeros((cls.SIZE, cls.SIZE, 1), np.uint8)
        # the pole, 30 pixels long from the cart at the bottom centre, leaning by its angle (x 3 to see it)
        t = np.linspace(0.0, 1.0, 60)
        angle = 3.0 * float(obs[2])
        cols = np.clip(np.round(cls.SIZE / 2 + 30 * t * np.sin(angle)), 0, cls.SIZE - 1).astype(int)
        rows = np.clip(np.round(cls.SIZE - 1 - 30 * t * np.cos(angle)), 0, cls.SIZE - 1).astype(int)
        frame[rows, cols, 0] = 255
        return {"camera": frame, "cart": obs[:2].astype(np.float32)}


class BoxCameraCartPole(gym.ObservationWrapper):
    """CartPole (Discrete actions, 200 steps) observed by CameraCartPole's camera alone: a 36x36x1 uint8
    Box outside a Dict (HWC, as SB3's CnnPolicy takes an Atari frame). `channels_first`: 1x36x36 (CHW)."""

    metadata = {"render_modes": []}  # noqa: RUF012
    channels_first = False

    def __init__(self) -> None:
        super().__init__(CameraCartPole())
        s = CameraCartPole.SIZE
        shape = (1, s, s) if self.channels_first else (s, s, 1)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)

    def observation(self, observation: Any) -> np.ndarray:
        frame = observation["camera"]
        return np.ascontiguousarray(frame.transpose(2, 0, 1)) if self.channels_first else frame


class BoxCameraCartPoleCHW(BoxCameraCartPole):
    channels_first = True


class CameraPendulum(_KeyedEnv):
    """Pendulum (a Box torque, 200 steps) observed by a colour camera and a rate gyro: {"camera": a 36x36x3
    uint8 frame (channel-last, as a camera gives it; the rod from the pivot at the centre in channel 0, its
    tip in channel 1, a fixed ramp in channel 2, so that the channels differ), "rate": [angular velocity]}."""

    metadata = {"render_modes": [], "observation_units": {"rate": "rad/s"}}  # noqa: RUF012
    SIZE = 36

    def __init__(self) -> None:
        super().__init__(TimeLimit(PendulumEnv(), 200))
        self.observation_space = gym.spaces.Dict(
            [
                ("camera", gym.spaces.Box(0, 255, (self.SIZE, self.SIZE, 3), np.uint8)),
                ("rate", gym.spaces.Box(-8.0, 8.0, (1,), np.float32)),
            ]
        )

    @classmethod
    def _keys(cls, obs: np.ndarray) -> dict[str, np.ndarray]:
        frame = np.zeros((cls.SIZE, cls.SIZE, 3), np.uint8)
        t = np.linspace(0.0, 1.0, 40)
        centre, length = cls.SIZE / 2, cls.SIZE / 2 - 2
        cols = np.clip(np.round(centre + length * t * float(obs[1])), 0, cls.SIZE - 1).astype(int)  # sin
        rows = np.clip(np.round(centre - length * t * float(obs[0])), 0, cls.SIZE - 1).astype(int)  # cos
        frame[rows, cols, 0] = 255
        frame[max(rows[-1] - 1, 0) : rows[-1] + 2, max(cols[-1] - 1, 0) : cols[-1] + 2, 1] = 255
        frame[:, :, 2] = np.arange(cls.SIZE, dtype=np.uint8)[None, :] * 7
        return {"camera": frame, "rate": obs[2:].astype(np.float32)}
