"""The off-policy agent's hooks into the driver (train.core.offpolicy_driver), framework-neutral: what most
algorithms do, as defaults. Both backends' agent bases derive from it; DQN and Rainbow override the hooks
in train.core.dqn_hooks and rainbow_hooks, so the driver names no algorithm."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl2edge.train.core.replay import ReplayBatch, ReplayBuffer


class OffPolicyAgentBase:
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The behaviour action before the driver's noise (each backend's base has it)."""
        raise NotImplementedError

    def train(self, batch: ReplayBatch) -> np.ndarray:
        """batch.n gradient steps, in order; the mean of stat_names over them (each backend's base has it)."""
        raise NotImplementedError

    def act(self, obs_norm: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
        """The action after warm-up, before the driver's action noise: SAC samples its policy, TD3/DDPG act
        greedily. `rng` is the run's generator (DQN's epsilon draws from it)."""
        return self.explore(obs_norm)

    def after_env_step(self, iteration: int) -> None:
        """After the env step of `iteration` (0-based, one per vector step), before any training phase."""

    def log_row(self, step: int) -> dict[str, float]:
        """Extra columns of the metrics row at env step `step`."""
        return {}

    def train_phase(
        self,
        buffer: ReplayBuffer,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
        step: int,
    ) -> np.ndarray | None:
        """n gradient steps on batches from `buffer`: the mean stats, or None when nothing was trained.
        By default all n batches are sampled at once and stepped in one call."""
        if not buffer.ready():  # HER: no episode finished yet
            return None
        return self.train(buffer.sample(n, batch_size, rng, normalize))
