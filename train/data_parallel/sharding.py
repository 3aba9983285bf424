"""Each minibatch split over the job's processes, and the agent that trains on its share.

A minibatch (the same one on every rank: the rollout is gathered and the order seeded alike) is cut into
`world` contiguous shares: samples for PPO and A2C, whole env sequences for the recurrent ones (a
sequence replays from its recorded state, so it cannot be cut in time). A share's loss is a mean over its
samples; its gradient, times the share's fraction of the minibatch, summed over ranks, is the gradient of
the minibatch's mean loss: the update one process makes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.train.core.recurrent_config import LSTMFields
from rl2edge.train.core.recurrent_rollout import SequenceMinibatch
from rl2edge.train.core.rollout_collector import share_bounds
from rl2edge.train.data_parallel.group import Replicas


def shard(mb: Any, world: int, rank: int) -> tuple[Any, float]:
    """This rank's share of a minibatch and its fraction of the minibatch's samples."""
    if isinstance(mb, SequenceMinibatch):
        envs = mb.advantages.shape[1]
        lo, hi = share_bounds(envs, world, rank)
        cut = lambda a: a[:, lo:hi]  # noqa: E731  [T, E, ...] and states [L, E, H]
        part = replace(
            mb,
            obs=cut(mb.obs),
            actions=cut(mb.actions),
            old_logprobs=cut(mb.old_logprobs),
            old_values=cut(mb.old_values),
            advantages=cut(mb.advantages),
            returns=cut(mb.returns),
            starts=cut(mb.starts),
            actor_state=tuple(cut(s) for s in mb.actor_state),
            critic_state=None if mb.critic_state is None else tuple(cut(s) for s in mb.critic_state),
        )
        return part, (hi - lo) / envs
    n = mb.advantages.shape[0]
    lo, hi = share_bounds(n, world, rank)
    part = replace(
        mb,
        obs=mb.obs[lo:hi],
        actions=mb.actions[lo:hi],
        old_logprobs=mb.old_logprobs[lo:hi],
        old_values=mb.old_values[lo:hi],
        advantages=mb.advantages[lo:hi],
        returns=mb.returns[lo:hi],
    )
    return part, (hi - lo) / n


def check_shardable(cfg: Any, world: int) -> None:
    """Every rank needs a non-empty share of every minibatch: refused before any process starts."""
    n_steps, algo = int(cfg.n_steps), str(cfg.algo)
    steps = cfg.n_envs * n_steps
    if cfg.n_envs < world:
        raise ConfigError(
            f"--nproc {world}: each process steps its share of the n_envs {cfg.n_envs} envs; set n_envs to "
            f"{world} or more (--config), or --per-process to give each process n_envs of its own"
        )
    batch = getattr(cfg, "batch_size", None) or steps  # A2C: the whole rollout
    if isinstance(cfg, LSTMFields):
        sequences = batch // n_steps
        if sequences < world:
            held = f"{sequences} whole sequence(s)" if sequences else "part of one sequence"
            raise ConfigError(
                f"--nproc {world}: {algo} splits each minibatch's whole env sequences over the processes, "
                f"and a minibatch of batch_size {batch} with n_steps {n_steps} holds {held}; set "
                f"batch_size to n_steps x {world} ({n_steps * world}) or more, or use --per-process"
            )
        return
    smallest = min(batch, steps % batch or batch)
    if smallest < world:
        raise ConfigError(
            f"--nproc {world}: a minibatch of {smallest} samples cannot give each process a share; "
            "set batch_size (and n_envs x n_steps) to a multiple of the process count"
        )


class ShardedAgent:
    """An on-policy torch agent (train.core.onpolicy_driver.OnPolicyAgent) that trains on its rank's share of
    each minibatch, its gradient averaged with the other ranks' before the clip and the step (the agent's
    `grad_sync` hook); everything else is the agent's own."""

    def __init__(self, agent: Any, replicas: Replicas):
        self.agent, self.replicas = agent, replicas
        self._weights: deque[float] = deque()
        agent.grad_sync = self._sync
        replicas.broadcast_(agent.policy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.agent, name)

    def _sync(self, params: list[Any]) -> None:
        self.replicas.sum_grads(params, self._weights.popleft())

    def train_minibatches(self, mbs: list[Any], clip: float) -> np.ndarray:
        r = self.replicas
        shares = [shard(mb, r.world, r.rank) for mb in mbs]
        self._weights.extend(w for _, w in shares)
        stats = self.agent.train_minibatches([s for s, _ in shares], clip)
        if self._weights:
            raise RuntimeError(f"{len(self._weights)} gradient(s) were not averaged over the ranks")
        return r.mean(stats)
