"""One preallocated numpy replay buffer for every off-policy algorithm and both backends.

Observations are stored raw and normalized when a batch is sampled, with the statistics current at
that moment (SB3's VecNormalize does the same), so that the checkpoint's frozen statistics are the ones
the final networks were trained against. `dones` holds terminations only: a time-limit truncation is
bootstrapped, and its `next_obs` is the episode's true final observation, not the reset one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rl2edge.errors import ConfigError

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplayBatch:
    """`n` stacked batches of `batch_size` transitions: a backend runs n gradient steps in one call."""

    obs: np.ndarray  # float32 [n, B, obs_dim], normalized
    actions: np.ndarray  # float32 [n, B, act_dim] in [-1, 1]-scaled units, or int64 [n, B]
    rewards: np.ndarray  # float32 [n, B]
    next_obs: np.ndarray  # float32 [n, B, obs_dim], normalized
    dones: np.ndarray  # float32 [n, B]: 1 where the episode terminated (not truncated)
    discounts: np.ndarray | None = None  # float32 [n, B]: gamma^k of n-step transitions (Rainbow)
    weights: np.ndarray | None = None  # float32 [n, B]: importance weights (prioritized replay; else 1)
    indices: np.ndarray | None = None  # int64 [n, B]: where the transitions are, for priority updates

    @property
    def n(self) -> int:
        return int(self.obs.shape[0])


def memory_limit() -> int | None:
    """The bytes this process may use: the machine's memory, or a container's (cgroup) limit if lower;
    None where neither can be read."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # not every platform reports it
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):  # v2, v1
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


def check_fits_memory(capacity: int, obs_size: int) -> None:
    """Refuse a buffer whose observations (obs and next_obs, float32) would not fit in the memory this
    process may use. numpy's zeros are committed only as they fill, so such a buffer would not fail here
    but hours into the run; camera frames make it likely (84x84x3 at SB3's default of 10^6 transitions:
    158 GiB)."""
    need = 2 * capacity * obs_size * 4
    total = memory_limit()
    if total is None:
        return
    if need > 0.8 * total:
        raise ConfigError(
            f"the replay buffer would hold {capacity:,} transitions of {obs_size:,} float32 values each: "
            f"{need / 2**30:.1f} GiB for the observations, more than 80 % of the "
            f"{total / 2**30:.1f} GiB of memory this process may use. Lower buffer_size (a --config file: "
            "`buffer_size: N`)"
        )
    if need > 2**30:
        _logger.info("the replay buffer's observations take up to %.1f GiB as it fills", need / 2**30)


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        with_discounts: bool = False,
    ):
        self.capacity, self.discrete = int(capacity), discrete
        check_fits_memory(self.capacity, int(np.prod(obs_shape)))
        self.obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.next_obs = np.zeros((self.capacity, *obs_shape), np.float32)
        self.actions = (
            np.zeros(self.capacity, np.int64) if discrete else np.zeros((self.capacity, act_dim), np.float32)
        )
        self.rewards = np.zeros(self.capacity, np.float32)
        self.dones = np.zeros(self.capacity, np.float32)
        self.discounts = np.zeros(self.capacity, np.float32) if with_discounts else None
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
        discounts: np.ndarray | None = None,
    ) -> np.ndarray:
        """A batch of transitions (one per env, or an n-step collector's); the oldest are overwritten once
        the buffer is full. Returns where they went."""
        n = len(rewards)
        idx = (self.pos + np.arange(n)) % self.capacity
        self.obs[idx] = obs
        self.next_obs[idx] = next_obs
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.dones[idx] = terminated
        if self.discounts is not None:
            if discounts is None:
                raise ValueError("this buffer stores n-step discounts; pass them")
            self.discounts[idx] = discounts
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return idx

    def _batch(
        self,
        idx: np.ndarray,
        normalize: Callable[[np.ndarray], np.ndarray],
        weights: np.ndarray | None = None,
    ) -> ReplayBatch:
        return ReplayBatch(
            normalize(self.obs[idx]),
            self.actions[idx],
            self.rewards[idx],
            normalize(self.next_obs[idx]),
            self.dones[idx],
            None if self.discounts is None else self.discounts[idx],
            np.ones(idx.shape, np.float32) if weights is None else weights,
            idx,
        )

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
        return self._batch(idx, normalize)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al. 2016), on the same arrays, with a sum tree.

    P(i) = p_i^alpha / sum_j p_j^alpha; importance weights w_i = (N P(i))^-beta / max_j w_j over the
    batch; new transitions enter with the largest priority seen so far, so each is replayed at least
    once soon; `update_priorities` sets p_i = |delta_i| + eps after a gradient step. Sampling is
    stratified: batch element b draws from the b-th of batch_size equal segments of the total mass.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        alpha: float,
        eps: float,
        with_discounts: bool = True,
    ):
        super().__init__(capacity, obs_shape, discrete, act_dim, with_discounts)
        from rl2edge.train.core.sum_tree import SumTree

        self.alpha, self.eps = float(alpha), float(eps)
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        discounts: np.ndarray | None = None,
    ) -> np.ndarray:
        idx = super().add(obs, actions, rewards, next_obs, terminated, discounts)
        self.tree.update(idx, np.full(len(idx), self.max_priority**self.alpha))
        return idx

    def sample(
        self,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
        beta: float = 1.0,
    ) -> ReplayBatch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree.total
        segment = total / batch_size
        mass = (np.arange(batch_size) + rng.random((n, batch_size))) * segment
        # rounding can carry a draw past the last filled leaf: clamp to the filled range
        idx = np.minimum(self.tree.find(mass.reshape(-1)), self.size - 1).reshape(n, batch_size)
        probs = self.tree[idx] / total
        weights = (self.size * probs) ** (-float(beta))
        weights /= weights.max(axis=1, keepdims=True)
        return self._batch(idx, normalize, weights.astype(np.float32))

    def update_priorities(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        """p_i = |priority_i| + eps (priorities: |TD error|, or the distributional loss per sample)."""
        p = np.abs(np.asarray(priorities, np.float64)).reshape(-1) + self.eps
        self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.update(np.asarray(idx).reshape(-1), p**self.alpha)
