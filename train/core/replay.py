"""One preallocated numpy replay buffer for every off-policy algorithm and both backends.

Observations are stored raw and normalized when a batch is sampled, with the statistics current at
that moment (SB3's VecNormalize does the same), so that the checkpoint's frozen statistics are the ones
the final networks were trained against. Each value keeps its dtype (ObservationStore): a uint8 camera
frame's pixels take one byte each, as in SB3's buffer, not four. `dones` holds terminations only: a time-limit truncation is
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


def check_fits_memory(capacity: int, obs_size: int, pixels: int = 0, copies: int = 2) -> None:
    """Refuse a buffer whose observations (`copies` per transition: obs and next_obs, or 1 where each is
    stored once; `pixels` uint8 values each, the rest float32) would not fit in the memory this process
    may use. numpy's zeros are committed only as they fill, so such a buffer would not fail here but
    hours into the run; camera frames make it likely (84x84x3 at SB3's default of 10^6 transitions: 39.4
    GiB in uint8, 19.7 with optimize_memory_usage)."""
    need = copies * capacity * observation_bytes(obs_size, pixels)
    total = memory_limit()
    if total is None:
        return
    if need > 0.8 * total:
        what = (
            f"{obs_size:,} values each ({pixels:,} of them uint8 pixels)"
            if pixels
            else f"{obs_size:,} float32 values each"
        )
        raise ConfigError(
            f"the replay buffer would hold {capacity:,} transitions of {what}: "
            f"{need / 2**30:.1f} GiB for the observations, more than 80 % of the "
            f"{total / 2**30:.1f} GiB of memory this process may use. Lower buffer_size (a --config file: "
            "`buffer_size: N`)"
            + ("" if copies == 1 else ", or store each observation once: `optimize_memory_usage: true`")
        )
    if need > 2**30:
        _logger.info("the replay buffer's observations take up to %.1f GiB as it fills", need / 2**30)


def observation_bytes(obs_size: int, pixels: int = 0) -> int:
    """One stored observation's bytes: a uint8 pixel takes 1, any other value 4 (float32)."""
    return pixels + 4 * (obs_size - pixels)


class ObservationStore:
    """A replay buffer's observations, each value in its own dtype: the uint8 pixels of camera frames
    (`pixels`, a mask over the flat observation, train.core.encoder_spec.image_mask) as uint8, the rest
    float32. Reading gives float32 equal bit for bit to what was written: the pixels are the integers
    0-255, exact in both. A key's values are contiguous, so each part is copied as a slice."""

    def __init__(self, capacity: int, size: int, pixels: np.ndarray | None = None):
        mask = np.zeros(size, bool) if pixels is None else np.asarray(pixels, bool).reshape(-1)
        if mask.size != size:
            raise ValueError(f"the pixel mask has {mask.size} entries; the observation has {size} values")
        self.size, self.pixels = size, int(mask.sum())
        # (slice of the observation, slice of frames or values) per run of pixels or of other values
        self._runs: list[tuple[slice, bool, slice]] = []
        edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
        starts, ends = np.concatenate([[0], edges]), np.concatenate([edges, [size]])
        at = {True: 0, False: 0}
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            px = bool(mask[a])
            self._runs.append((slice(a, b), px, slice(at[px], at[px] + b - a)))
            at[px] += b - a
        self.frames = np.zeros((capacity, self.pixels), np.uint8)
        self.values = np.zeros((capacity, size - self.pixels), np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes + self.values.nbytes)

    def __setitem__(self, idx: np.ndarray, obs: np.ndarray) -> None:
        if not self.pixels:
            self.values[idx] = obs
            return
        obs = np.asarray(obs)
        for part, px, to in self._runs:
            (self.frames if px else self.values)[idx, to] = obs[..., part]

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        if not self.pixels:
            return self.values[idx]
        out = np.empty((*np.shape(idx), self.size), np.float32)
        for part, px, src in self._runs:
            out[..., part] = (self.frames if px else self.values)[idx, src]
        return out


class ReplayBuffer:
    stores_next_obs = True
    """A copy of each transition's next observation (SharedObsReplayBuffer derives it instead)."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        with_discounts: bool = False,
        pixels: np.ndarray | None = None,
        spare: int = 0,
    ):
        """`pixels`: which values of the flat observation are uint8 pixels (stored as uint8). `spare`: slots
        of the ring beyond `capacity`, which hold no sampled transition (SharedObsReplayBuffer's)."""
        if len(obs_shape) != 1:
            raise ValueError(f"the replay buffer stores flat observations, not {obs_shape}")
        self.capacity, self.discrete = int(capacity), discrete
        self.slots = self.capacity + int(spare)
        size = int(obs_shape[0])
        copies = 2 if self.stores_next_obs else 1
        check_fits_memory(self.slots, size, 0 if pixels is None else int(np.count_nonzero(pixels)), copies)
        self.obs = ObservationStore(self.slots, size, pixels)
        self.next_obs = ObservationStore(self.slots, size, pixels) if self.stores_next_obs else None
        self.actions = (
            np.zeros(self.slots, np.int64) if discrete else np.zeros((self.slots, act_dim), np.float32)
        )
        self.rewards = np.zeros(self.slots, np.float32)
        self.dones = np.zeros(self.slots, np.float32)
        self.discounts = np.zeros(self.slots, np.float32) if with_discounts else None
        self.pos, self.size = 0, 0

    def __len__(self) -> int:
        return self.size

    def ready(self) -> bool:
        """Something can be sampled (HER: a finished episode)."""
        return self.size > 0

    def mark_episode_ends(self, done: np.ndarray) -> None:
        """The envs whose episode ended at the step just added; uniform replay keeps no episodes."""

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
        idx = (self.pos + np.arange(n)) % self.slots
        self.obs[idx] = obs
        self._store_next_obs(idx, next_obs)
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.dones[idx] = terminated
        if self.discounts is not None:
            if discounts is None:
                raise ValueError("this buffer stores n-step discounts; pass them")
            self.discounts[idx] = discounts
        self.pos = int((self.pos + n) % self.slots)
        self.size = min(self.size + n, self.capacity)
        return idx

    def _store_next_obs(self, idx: np.ndarray, next_obs: np.ndarray) -> None:
        assert self.next_obs is not None
        self.next_obs[idx] = next_obs

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
            normalize(self._next_obs(idx)),
            self.dones[idx],
            None if self.discounts is None else self.discounts[idx],
            np.ones(idx.shape, np.float32) if weights is None else weights,
            idx,
        )

    def _next_obs(self, idx: np.ndarray) -> np.ndarray:
        assert self.next_obs is not None
        return self.next_obs[idx]

    def _slots(self, k: np.ndarray) -> np.ndarray:
        """The slots of the k-th stored transitions (k < size): the last `size` written before `pos`. Until
        the ring wraps, slot k itself (with no spare slots, always)."""
        return k if self.slots == self.capacity else (self.pos - self.size + k) % self.slots

    def sample(
        self,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
    ) -> ReplayBatch:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self._batch(self._slots(rng.integers(0, self.size, size=(n, batch_size))), normalize)


class SharedObsReplayBuffer(ReplayBuffer):
    """SB3's `optimize_memory_usage`: each observation stored once, a transition's next observation being
    the next one its env gave, `n_envs` slots further on. One ring of capacity + n_envs slots: the newest
    transitions' next observations wait in the n_envs slots past them, which hold no transition, so at most
    `capacity` are sampled. Where an episode ended (`mark_episode_ends`), the slot past it will hold the
    reset observation: the true final one is kept aside for that transition, so the next observations
    sampled are bit for bit the plain buffer's, truncations bootstrapped from the right state (SB3's own
    form refuses timeouts with this option; here they keep working). One observation per episode is the
    cost. Uniform replay only: n-step collectors (Rainbow) and HER add transitions of their own cadence."""

    stores_next_obs = False

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        n_envs: int,
        pixels: np.ndarray | None = None,
    ):
        super().__init__(capacity, obs_shape, discrete, act_dim, pixels=pixels, spare=n_envs)
        self.n_envs = int(n_envs)
        self.final: dict[int, np.ndarray] = {}  # slot -> the final observation of its ended episode
        self._last = np.zeros(0, np.int64)

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        discounts: np.ndarray | None = None,
    ) -> np.ndarray:
        if len(rewards) != self.n_envs:
            raise ValueError(f"this buffer takes one transition per env ({self.n_envs}), got {len(rewards)}")
        idx = super().add(obs, actions, rewards, next_obs, terminated, discounts)
        for slot in idx.tolist():  # slots reused: their old final observations go
            self.final.pop(slot, None)
        self._last = idx
        return idx

    def _store_next_obs(self, idx: np.ndarray, next_obs: np.ndarray) -> None:
        self.obs[(idx + self.n_envs) % self.slots] = next_obs  # until the next add: then its obs, the same

    def mark_episode_ends(self, done: np.ndarray) -> None:
        """The envs whose episode ended at the step just added: their next slot will hold the reset
        observation, so each one's final observation is kept for its transition."""
        for slot in self._last[np.flatnonzero(done)].tolist():
            self.final[slot] = self.obs[np.array([(slot + self.n_envs) % self.slots])][0]

    def _next_obs(self, idx: np.ndarray) -> np.ndarray:
        next_obs = self.obs[(idx + self.n_envs) % self.slots]
        if self.final:
            for at in np.argwhere(np.isin(idx, list(self.final))):
                next_obs[tuple(at)] = self.final[int(idx[tuple(at)])]
        return next_obs


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
        pixels: np.ndarray | None = None,
    ):
        super().__init__(capacity, obs_shape, discrete, act_dim, with_discounts, pixels)
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
