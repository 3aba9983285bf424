"""Plants that give a NaN or inf now and then, as real ones do (a sensor that drops out, a reward computed
from a divide by zero): what `train` must stop on with one line (train.core.env_check).
`--env testkit.nonfinite_envs:NanObservationCartPole`, from the repository root."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.wrappers import TimeLimit

from testkit.dict_envs import DictCartPole
from testkit.goal_envs import PointReach

AT_STEP = 300
"""The plant step (counted over every episode of one env copy) whose answer holds the bad value."""


class _Counting(TimeLimit):
    def __init__(self) -> None:
        super().__init__(CartPoleEnv(), 500)
        self.plant_steps = 0

    def step(self, action: Any) -> Any:
        self.plant_steps += 1
        return super().step(action)


class NanObservationCartPole(_Counting):
    """The pole's angular velocity reads NaN at plant step AT_STEP."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.plant_steps == AT_STEP:
            obs = np.array(obs, copy=True)
            obs[3] = np.nan
        return obs, reward, terminated, truncated, info


class InfRewardCartPole(_Counting):
    """The reward is +inf at plant step AT_STEP."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (np.inf if self.plant_steps == AT_STEP else reward), terminated, truncated, info


class HugeRewardCartPole(_Counting):
    """Finite rewards of 1e30: every value estimate and loss overflows float32 (the losses go inf, then NaN)."""

    def step(self, action: Any) -> Any:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1e30, terminated, truncated, info


class NanKeyDictCartPole(DictCartPole):
    """DictCartPole whose "cart" key reads [position, NaN] at plant step AT_STEP."""

    def __init__(self) -> None:
        super().__init__()
        self.plant_steps = 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.plant_steps += 1
        if self.plant_steps == AT_STEP:
            obs = {**obs, "cart": np.array([obs["cart"][0], np.nan], np.float32)}
        return obs, reward, terminated, truncated, info


class NanGoalRewardPointReach(PointReach):
    """PointReach whose compute_reward shapes with a normalized distance, 0/0 = NaN where the goal is reached
    exactly: never in env.step (a continuous plant), but on HER's relabeled goals, which are achieved goals
    of the same episode."""

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        diff = np.asarray(achieved_goal, np.float64) - np.asarray(desired_goal, np.float64)
        d = np.linalg.norm(diff, axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (super().compute_reward(achieved_goal, desired_goal, info) * d / d).astype(np.float32)


class ScalarRewardPointReach(PointReach):
    """compute_reward written for one goal at a time: one float whatever it is given."""

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> Any:
        return float(np.mean(super().compute_reward(achieved_goal, desired_goal, info)))
