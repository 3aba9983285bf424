"""Goal-conditioned plants with a sparse reward, in Gymnasium-Robotics' GoalEnv convention (a Dict of
`observation`, `achieved_goal`, `desired_goal`; a vectorized `compute_reward`; `is_success` in info):
what HER (train.core.her) is for. `testkit.goal_envs:PointReach` drives a point to a station on a plane,
as an AGV docks; `PointReachDiscrete` does it with five commands (stop, +-x, +-y) for DQN."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

TOLERANCE, STEP, EPISODE = 0.1, 0.1, 50


class PointReach(gym.Env):
    """Start and goal uniform in [-1, 1]^2; each step moves by STEP times the action (clipped to the
    plane); the reward is 0 within TOLERANCE of the goal and -1 elsewhere, every step; episodes are
    truncated after EPISODE steps, never terminated (Fetch's convention)."""

    metadata = {"render_modes": []}  # noqa: RUF012

    def __init__(self) -> None:
        box = lambda: gym.spaces.Box(-1.0, 1.0, (2,), np.float32)  # noqa: E731
        self.observation_space = gym.spaces.Dict(
            [("observation", box()), ("achieved_goal", box()), ("desired_goal", box())]
        )
        self.action_space: gym.Space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._pos = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._t = 0

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        d = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(d > TOLERANCE).astype(np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._pos.copy(),
            "achieved_goal": self._pos.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._t = 0
        return self._obs(), {}

    def _move(self, action: Any) -> np.ndarray:
        return np.clip(np.asarray(action, np.float32).reshape(2), -1.0, 1.0)

    def step(self, action: Any) -> Any:
        self._pos = np.clip(self._pos + STEP * self._move(action), -1.0, 1.0).astype(np.float32)
        self._t += 1
        reward = float(self.compute_reward(self._pos, self._goal, {}))
        info = {"is_success": reward == 0.0}
        return self._obs(), reward, False, self._t >= EPISODE, info


class PointReachDiscrete(PointReach):
    """The same plant with five commands: stop, +x, -x, +y, -y."""

    MOVES = np.array([[0, 0], [1, 0], [-1, 0], [0, 1], [0, -1]], np.float32)

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Discrete(5)

    def _move(self, action: Any) -> np.ndarray:
        return self.MOVES[int(action)]


def success_rate(
    act: Callable[[Any], Any], episodes: int, first_seed: int = 100, env: gym.Env | None = None
) -> float:
    """The share of `episodes` (env seeds first_seed, first_seed + 1, ...) that end at the goal
    (`is_success` at the last step), acting with `act` on PointReach (or `env`)."""
    env = env or PointReach()
    reached = []
    for seed in range(first_seed, first_seed + episodes):
        obs, _ = env.reset(seed=seed)
        done, info = False, {}
        while not done:
            obs, _, terminated, truncated, info = env.step(act(obs))
            done = terminated or truncated
        reached.append(bool(info["is_success"]))
    return float(np.mean(reached))
