"""Plants whose sensor drifts: the same env, one observation value offset from a given step on (a sensor
recalibrated, a transmitter that slipped). What serve's drift monitor must notice; the plant's own dynamics are
untouched, only what it reports. `--env testkit.drifting_plants:ShiftedCartPole` (importable from the
repository root, as the CLI's processes in the tests run)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from examples.agv.env import AgvDictEnv


class ShiftedCartPole(CartPoleEnv):
    """CartPole whose cart-position sensor reads OFFSET m too far from plant step SHIFT_AFTER on (steps
    counted over every episode of the instance, as a PLC's uptime)."""

    SHIFT_AFTER = 1500
    OFFSET = 1.5
    INDEX = 0

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.plant_steps = self.episode_steps = 0

    def _read(self, obs: Any) -> Any:
        if self.plant_steps >= self.SHIFT_AFTER:
            obs = np.array(obs, copy=True)
            obs[self.INDEX] += self.OFFSET
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        self.episode_steps = 0
        return self._read(obs), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.plant_steps += 1
        self.episode_steps += 1
        # CartPoleEnv has no time limit of its own (gymnasium.make adds one): 500 steps, as CartPole-v1
        truncated = truncated or (self.episode_steps >= 500 and not terminated)
        return self._read(obs), reward, terminated, truncated, info


class UnshiftedCartPole(ShiftedCartPole):
    """The same plant with its sensor left alone: what the drift monitor must not alarm on."""

    SHIFT_AFTER = 10**12


class ShiftedAgv(AgvDictEnv):
    """The AGV whose speed sensor reads 0.5 m/s too fast from plant step SHIFT_AFTER on (the vehicle's speed
    range is -0.5 to 1.5 m/s), counted over every episode of the instance."""

    SHIFT_AFTER = 0
    OFFSET = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.plant_steps = 0

    def _read(self, obs: Any) -> Any:
        if self.plant_steps >= self.SHIFT_AFTER:
            obs = dict(obs)
            obs["speed"] = obs["speed"] + np.float32(self.OFFSET)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        return self._read(obs), info

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.plant_steps += 1
        return self._read(obs), reward, terminated, truncated, info


class UnshiftedAgv(ShiftedAgv):
    """The same plant with its speed sensor left alone."""

    SHIFT_AFTER = 10**12
