"""On-policy rollout storage, GAE, and minibatches: the float work both backends share.

Returns, advantages and per-minibatch advantage normalization are computed here, in numpy float32,
and nowhere else, so that the torch and TF backends (and TF's eager and graph modes) see the very same
numbers. Log-probabilities and values are recorded while acting, so the update needs no second
forward pass to recover them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError


@dataclass(frozen=True)
class Minibatch:
    obs: np.ndarray  # float32 [B, *obs_shape], already normalized
    actions: (
        np.ndarray
    )  # int64 [B] (discrete), int64 [B, components] (multi-discrete) or float32 [B, act_dim]
    old_logprobs: np.ndarray  # float32 [B]
    old_values: np.ndarray  # float32 [B]
    advantages: np.ndarray  # float32 [B], normalized when asked
    returns: np.ndarray  # float32 [B]


def check_minibatch(
    mb: Minibatch,
    obs_shape: tuple[int, ...],
    discrete: bool,
    n_actions: int,
    nvec: tuple[int, ...] | None = None,
) -> None:
    """The backend boundary's tensor contract: wrong dtypes or shapes fail here, at the first update.
    `nvec`: a multi-discrete action's choices per component (its actions are [B, components])."""
    b = mb.obs.shape[0]
    if mb.obs.dtype != np.float32 or mb.obs.shape[1:] != obs_shape:
        raise ConfigError(f"batch obs must be float32 {obs_shape}, got {mb.obs.dtype} {mb.obs.shape[1:]}")
    for name in ("old_logprobs", "old_values", "advantages", "returns"):
        arr = getattr(mb, name)
        if arr.dtype != np.float32 or arr.shape != (b,):
            raise ConfigError(f"batch {name} must be float32 [{b}], got {arr.dtype} {arr.shape}")
    if nvec is not None:
        if not np.issubdtype(mb.actions.dtype, np.integer) or mb.actions.shape != (b, len(nvec)):
            raise ConfigError(
                f"multi-discrete batch actions must be integer [{b}, {len(nvec)}], got {mb.actions.dtype} "
                f"{mb.actions.shape}"
            )
        if mb.actions.size and (mb.actions.min() < 0 or (mb.actions >= np.asarray(nvec)).any()):
            raise ConfigError(
                f"multi-discrete batch actions must lie in [0, nvec) per component, nvec {list(nvec)}"
            )
    elif discrete:
        if not np.issubdtype(mb.actions.dtype, np.integer) or mb.actions.shape != (b,):
            raise ConfigError(
                f"discrete batch actions must be integer [{b}], got {mb.actions.dtype} {mb.actions.shape}"
            )
        if mb.actions.size and (mb.actions.min() < 0 or mb.actions.max() >= n_actions):
            raise ConfigError(
                f"discrete batch actions must lie in [0, {n_actions}), got {mb.actions.min()}..{mb.actions.max()}"
            )
    elif mb.actions.dtype != np.float32 or mb.actions.shape != (b, n_actions):
        raise ConfigError(
            f"continuous batch actions must be float32 [{b}, {n_actions}], got {mb.actions.dtype} {mb.actions.shape}"
        )


def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    terminated: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation over a [T, N] rollout.

    `terminated[t]` is 1 where the step t ended its episode by termination or truncation; truncated
    steps have their reward already bootstrapped with gamma * V(final_obs), as SB3 does. `values[t]`
    and `last_values` are V of the observation at t and after the last step.
    """
    t_max = rewards.shape[0]
    advantages = np.zeros_like(rewards, dtype=np.float32)
    gae = np.zeros(rewards.shape[1], np.float32)
    gamma32, lam32 = np.float32(gamma), np.float32(gae_lambda)
    for t in reversed(range(t_max)):
        next_values = last_values if t == t_max - 1 else values[t + 1]
        not_done = np.float32(1.0) - terminated[t]
        delta = rewards[t] + gamma32 * next_values * not_done - values[t]
        gae = delta + gamma32 * lam32 * not_done * gae
        advantages[t] = gae
    returns = (advantages + values).astype(np.float32)
    return advantages, returns


class RolloutBuffer:
    """[n_steps, n_envs] storage, preallocated once."""

    def __init__(
        self,
        n_steps: int,
        n_envs: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        nvec: tuple[int, ...] | None = None,
    ):
        """`nvec`: a multi-discrete action's choices per component (one int64 index per component)."""
        self.n_steps, self.n_envs = n_steps, n_envs
        self.obs_shape, self.discrete, self.act_dim, self.nvec = obs_shape, discrete, act_dim, nvec
        self.obs = np.zeros((n_steps, n_envs, *obs_shape), np.float32)
        if nvec is not None:
            self.actions = np.zeros((n_steps, n_envs, len(nvec)), np.int64)
        elif discrete:
            self.actions = np.zeros((n_steps, n_envs), np.int64)
        else:
            self.actions = np.zeros((n_steps, n_envs, act_dim), np.float32)
        self.logprobs = np.zeros((n_steps, n_envs), np.float32)
        self.values = np.zeros((n_steps, n_envs), np.float32)
        self.rewards = np.zeros((n_steps, n_envs), np.float32)
        self.dones = np.zeros((n_steps, n_envs), np.float32)
        self.advantages = np.zeros((n_steps, n_envs), np.float32)
        self.returns = np.zeros((n_steps, n_envs), np.float32)
        self.pos = 0

    def begin_segment(self, seg: Any) -> None:
        """A collected rollout (train.core.rollout_collector.Segment) is about to be added step by step: what
        a buffer keeps of it beyond the steps (a sequence buffer: the episode starts and the states)."""

    def check_minibatch(self, mb: Minibatch) -> None:
        """The backend boundary's tensor contract, checked on the first update's first minibatch."""
        check_minibatch(mb, self.obs_shape, self.discrete, self.act_dim, self.nvec)

    def add(self, obs: Any, actions: Any, logprobs: Any, values: Any, rewards: Any, dones: Any) -> None:
        t = self.pos
        self.obs[t], self.actions[t], self.logprobs[t] = obs, actions, logprobs
        self.values[t], self.rewards[t], self.dones[t] = values, rewards, dones
        self.pos += 1

    def finish(self, last_values: np.ndarray, gamma: float, gae_lambda: float) -> None:
        if self.pos != self.n_steps:
            raise RuntimeError(f"rollout holds {self.pos} of {self.n_steps} steps")
        self.advantages, self.returns = compute_gae(
            self.rewards, self.values, self.dones, last_values.astype(np.float32), gamma, gae_lambda
        )
        self.pos = 0

    def minibatches(
        self, batch_size: int, rng: np.random.Generator, normalize_advantage: bool
    ) -> Iterator[Minibatch]:
        n = self.n_steps * self.n_envs
        flat = lambda a: a.reshape(n, *a.shape[2:])  # noqa: E731
        obs, actions, logprobs = flat(self.obs), flat(self.actions), flat(self.logprobs)
        values, advantages, returns = flat(self.values), flat(self.advantages), flat(self.returns)
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            adv = advantages[idx]
            if normalize_advantage and idx.size > 1:
                adv = ((adv - adv.mean()) / (adv.std() + np.float32(1e-8))).astype(np.float32)
            yield Minibatch(obs[idx], actions[idx], logprobs[idx], values[idx], adv, returns[idx])
