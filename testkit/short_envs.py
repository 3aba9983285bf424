"""A Gymnasium env for the rollout tests, importable by Ray workers (`testkit.short_envs:ShortCartPole`)."""

from __future__ import annotations

from typing import Any

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class ShortCartPole(CartPoleEnv):
    """CartPole cut at 25 steps. Episodes of an early policy also end by falling at random times, so the
    envs fall out of step: at a given step some envs, not all, are truncated (a partial bootstrap batch)."""

    limit = 25

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self._t = 0
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self._t += 1
        return obs, reward, terminated, truncated or (self._t >= self.limit and not terminated), info
