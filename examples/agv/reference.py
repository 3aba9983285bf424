"""Hand-written policies for the AGV, to measure a trained one against, and a function that runs them.

`reference_policy` is a potential field on the Dict observation alone (no map, no position): the goal
pulls at unit strength along its bearing, every lidar return closer than 1.5 m pushes away, and the
vehicle steers toward the sum, slowing down for what is ahead and near the goal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from examples.agv.env import BEAM_ANGLES, RADIUS, SPEED_RANGE, YAW_RATE_RANGE, AgvDictEnv

Policy = Callable[[dict[str, np.ndarray]], np.ndarray]

REPEL_WITHIN_M = 1.5  # returns beyond this do not push
REPEL_GAIN = 0.6
TURN_GAIN = 2.0  # rad/s per rad of heading error
# beams within +-45 deg of the heading: what the vehicle would drive into
AHEAD = np.abs(np.arctan2(np.sin(BEAM_ANGLES), np.cos(BEAM_ANGLES))) <= np.pi / 4 + 1e-9


def reference_policy(obs: dict[str, np.ndarray]) -> np.ndarray:
    """The action (speed m/s, yaw rate rad/s) for one Dict observation."""
    ranges = obs["lidar"].astype(np.float64)
    distance, cos_b, sin_b = (float(v) for v in obs["goal"])
    # repulsion grows as 1/r - 1/r0 (zero at r0), pointing away from each return
    push = np.where(ranges < REPEL_WITHIN_M, 1.0 / np.maximum(ranges, 0.05) - 1.0 / REPEL_WITHIN_M, 0.0)
    field_x = cos_b - REPEL_GAIN * float(np.sum(push * np.cos(BEAM_ANGLES)))
    field_y = sin_b - REPEL_GAIN * float(np.sum(push * np.sin(BEAM_ANGLES)))
    error = float(np.arctan2(field_y, field_x))  # heading error toward the field, vehicle frame
    yaw_rate = float(np.clip(TURN_GAIN * error, *YAW_RATE_RANGE))
    # speed: full ahead when aligned, nothing when the field points behind, slower as the way ahead
    # closes (stop 0.25 m before the vehicle's edge would touch) and near the goal
    clearance = float(ranges[AHEAD].min()) - RADIUS - 0.25
    speed = SPEED_RANGE[1] * max(np.cos(error), 0.0)
    speed = min(speed, max(0.8 * clearance, 0.0), max(distance, 0.3))
    return np.array([speed, yaw_rate], np.float32)


def standstill(obs: dict[str, np.ndarray]) -> np.ndarray:
    return np.zeros(2, np.float32)


def random_policy(seed: int) -> Policy:
    """Uniform actions over the action space, from its own seeded generator."""
    rng = np.random.default_rng(seed)
    low, high = np.array([SPEED_RANGE[0], YAW_RATE_RANGE[0]]), np.array([SPEED_RANGE[1], YAW_RATE_RANGE[1]])
    return lambda obs: rng.uniform(low, high).astype(np.float32)


def run_episodes(policy: Policy, episodes: int, seed: int = 0) -> list[float]:
    """The returns of `episodes` episodes of `policy` in AgvDictEnv, episode i reset with seed + i (as
    rl2edge's evaluate does)."""
    env = AgvDictEnv()
    returns = []
    for i in range(episodes):
        obs: Any
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns
