"""The Zoo's partially observed tasks (sb3-contrib / rl-baselines3-zoo's `NoVel` envs): Gymnasium's classic
tasks with the velocities left out of the observation, so that a policy must infer them from the history
(a recurrent policy's state, or a frame stack). Registered under the Zoo's ids when train.core.envs is
imported: CartPoleNoVel-v1, PendulumNoVel-v1, LunarLanderNoVel-v3 (Gymnasium's LunarLander is v3)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv


class CartPoleNoVel(CartPoleEnv):
    """CartPole observing the cart's position and the pole's angle only (the Zoo's CartPoleNoVelEnv)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        return obs[[0, 2]], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[[0, 2]], reward, terminated, truncated, info


class PendulumNoVel(PendulumEnv):
    """Pendulum observing cos and sin of the angle, not the angular velocity."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(**kwargs)
        return obs[:2], info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[:2], reward, terminated, truncated, info


class NoVelocity(gym.ObservationWrapper):
    """Any env with the observation's velocity entries removed."""

    def __init__(self, env: gym.Env, keep: list[int]):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self.keep = keep
        self.observation_space = gym.spaces.Box(space.low[keep], space.high[keep], dtype=space.dtype)

    def observation(self, obs: np.ndarray) -> np.ndarray:
        return obs[self.keep]


def lunar_lander_no_vel(**kwargs: Any) -> gym.Env:
    """LunarLander without its linear (2, 3) and angular (5) velocities, as the Zoo's LunarLanderNoVel."""
    return NoVelocity(gym.make("LunarLander-v3", **kwargs).unwrapped, [0, 1, 4, 6, 7])


def register() -> None:
    """Register the ids once (train.core.envs calls it on import)."""
    if "CartPoleNoVel-v1" in gym.registry:
        return
    gym.register("CartPoleNoVel-v1", entry_point=CartPoleNoVel, max_episode_steps=500, reward_threshold=475.0)
    gym.register("PendulumNoVel-v1", entry_point=PendulumNoVel, max_episode_steps=200)
    gym.register(
        "LunarLanderNoVel-v3", entry_point=lunar_lander_no_vel, max_episode_steps=1000, reward_threshold=200
    )
