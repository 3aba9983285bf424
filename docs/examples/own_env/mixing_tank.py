"""A small plant of your own, as docs/own-env.md walks it through rl2edge: a mixing tank whose level a
drain valve holds at a setpoint while the inflow wanders.

Observation, in the PLC's units (the order the node map must follow):
    0  level      m        0 .. 2     measured, with sensor noise
    1  setpoint   m        0.4 .. 1.6 the operator's setpoint
    2  inflow     m3/min   0 .. 1.2   measured feed into the tank
Action: the drain valve's opening, 0 (closed) .. 1 (open), a Box of one component.
Reward: 1 - the level error in metres, every step; overflowing or running dry trips the plant and ends
the episode (the steps it would have run are lost). An episode is at most 200 steps of 1 s.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

AREA_M2 = 1.5  # tank cross-section
DRAIN_M3_PER_MIN = 2.0  # outflow at a fully open valve and 1 m of level (Torricelli: ~ sqrt(level))
DT_S = 1.0
EPISODE_STEPS = 200


class MixingTank(gym.Env):
    """No constructor arguments: rl2edge makes the env as `MixingTank()` in every command."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(
            low=np.array([0.0, 0.4, 0.0], np.float32), high=np.array([2.0, 1.6, 1.2], np.float32)
        )
        self.action_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self._level = self._setpoint = self._inflow = 0.0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._level = float(self.np_random.uniform(0.3, 1.7))
        self._setpoint = float(self.np_random.uniform(0.5, 1.5))
        self._inflow = float(self.np_random.uniform(0.2, 1.0))
        self._t = 0
        return self._observe(), {}

    def step(self, action: Any) -> Any:
        valve = float(np.clip(np.asarray(action, np.float64).reshape(-1)[0], 0.0, 1.0))
        outflow = DRAIN_M3_PER_MIN * valve * np.sqrt(max(self._level, 0.0))
        self._level += (self._inflow - outflow) / 60.0 * DT_S / AREA_M2 * 20.0  # 20x: a lively tank
        # the feed wanders as an upstream process would, within its range
        self._inflow = float(np.clip(self._inflow + self.np_random.normal(0.0, 0.02), 0.0, 1.2))
        self._t += 1
        reward = 1.0 - abs(self._level - self._setpoint)
        terminated = not 0.0 < self._level < 2.0  # overflow or dry: a trip
        self._level = float(np.clip(self._level, 0.0, 2.0))
        truncated = self._t >= EPISODE_STEPS  # the time limit lives in the env: see docs/own-env.md
        return self._observe(), float(reward), terminated, truncated and not terminated, {}

    def _observe(self) -> np.ndarray:
        noise = self.np_random.normal(0.0, 0.005)
        level = float(np.clip(self._level + noise, 0.0, 2.0))
        return np.array([level, self._setpoint, self._inflow], np.float32)


def proportional_valve(obs: np.ndarray) -> np.ndarray:
    """A hand-tuned reference controller: open the drain in proportion to the level above the setpoint,
    plus the opening that balances the measured inflow."""
    level, setpoint, inflow = (float(v) for v in obs)
    balance = inflow / (DRAIN_M3_PER_MIN * np.sqrt(max(level, 1e-3)))
    return np.array([np.clip(balance + 1.5 * (level - setpoint), 0.0, 1.0)], np.float32)
