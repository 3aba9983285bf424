"""Envs a user might write wrong, for the one-line errors `train` gives on them (train.core.env_check):
`--env testkit.broken_envs:OldApiCartPole`, from the repository root."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from testkit.dict_envs import DictCartPole

FAIL_AT = 5


class OldApiCartPole(CartPoleEnv):
    """step returns gym's old 4-tuple (obs, reward, done, info)."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class RaisingCartPole(CartPoleEnv):
    """step raises at its FAIL_AT-th call: a plant model whose solver gives up."""

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self.calls = 0

    def step(self, action: Any) -> Any:
        self.calls += 1
        if self.calls == FAIL_AT:
            raise RuntimeError("the valve model did not converge")
        return super().step(action)


class WideCartPole(CartPoleEnv):
    """Observations of 5 values while its observation_space declares 4."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        return np.append(obs, np.float32(0.0)), info


class WideKeyDictCartPole(DictCartPole):
    """DictCartPole whose "cart" key gives 3 values where its space declares 2."""

    def reset(self, **kwargs: Any) -> Any:
        obs, info = super().reset(**kwargs)
        return {**obs, "cart": np.append(obs["cart"], np.float32(0.0))}, info


class EndlessCartPole(CartPoleEnv):
    """A cart on a pole that never falls and a plant that never says an episode ended: no termination, no
    time limit (a continuous process modelled as one endless episode)."""

    def step(self, action: Any) -> Any:
        _, reward, _, _, info = super().step(action)
        self.state = np.zeros(4)  # the pole stays up whatever the action
        return np.zeros(4, np.float32), reward, False, False, info
