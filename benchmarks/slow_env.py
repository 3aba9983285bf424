"""A deliberately slow environment for the rollout-scaling benchmark: CartPole-v1 whose step sleeps, as a
plant's digital twin or a physics simulator would take that long (`--env benchmarks.slow_env:SlowCartPole`)."""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

STEP_DELAY_S = float(os.environ.get("SLOW_ENV_DELAY_S", "0.001"))


class SlowCartPole(CartPoleEnv):
    """CartPole-v1 (500-step limit) that sleeps STEP_DELAY_S per step."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.spec = gym.spec("CartPole-v1")
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        self._steps = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        time.sleep(STEP_DELAY_S)
        obs, reward, terminated, truncated, info = super().step(action)
        self._steps += 1
        return obs, reward, terminated, truncated or self._steps >= 500, info
