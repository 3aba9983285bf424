"""One preallocated numpy replay buffer for every off-policy algorithm and both backends.

Observations are stored raw and normalized when a batch is sampled, with the statistics current at
that moment (SB3's VecNormalize does the same), so that the checkpoint's frozen statistics are the ones
the final networks were trained against. `dones` holds terminations only: a time-limit truncation is
bootstrapped, and its `next_obs` is the episode's true final observation, not the reset one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ReplayBatch:
    """`n` stacked batches of `batch_size` transitions: a backend runs n gradient steps in one call."""

    obs: np.ndarray  # float32 [n, B, obs_dim], normalized
    actions: np.ndarray  # float32 [n, B, act_dim] in [-1, 1]-scaled units, or int64 [n, B]
    rewards: np.ndarray  # float32 [n, B]
    next_obs: np.ndarray  # float32 [n, B, obs_dim], normalized
    dones: np.ndarray  # float32 [n, B]: 1 where the episode terminated (not truncated)

    @property
    def n(self) -> int:
        return int(self.obs.shape[0])


class ReplayBuffer:
    def __init__(self, capacity: int, obs_shape: tuple[int, ...], discrete: bool, act_dim: int):
        self.capacity, self.discrete = int(capacity), discrete
        self.obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.next_obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.actions = (
            np.zeros(self.capacity, np.int64) if discrete else np.zeros((self.capacity, act_dim), np.float32)
        )
        self.rewards = np.zeros(self.capacity, np.float32)
        self.dones = np.zeros(self.capacity, np.float32)
        self.pos, self.size = 0, 0

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
    ) -> None:
        """A batch of transitions, one per env; the oldest are overwritten once the buffer is full."""
        n = len(rewards)
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.next_obs[idx] = next_obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.dones[idx] = terminated
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)

    def sample(
        self,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
    ) -> ReplayBatch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = rng.integers(0, self.size, size=(n, batch_size))
        return ReplayBatch(
            normalize(self.obs[idx]),
            self.actions[idx],
            self.rewards[idx],
            normalize(self.next_obs[idx]),
            self.dones[idx],
        )
