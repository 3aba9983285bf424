"""Rainbow's side of the off-policy driver beyond DQN's (train.core.dqn_hooks), framework-neutral: the
prioritized training phase. Mixed into TorchRainbow and TFRainbow ahead of their DQN agent."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl2edge.train.core.dqn_hooks import DQNHooks
from rl2edge.train.core.offpolicy_config import RainbowConfig
from rl2edge.train.core.replay import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer


class RainbowHooks(DQNHooks):
    """Needs, beyond DQN's, the agent's `train_prioritized(batch) -> (mean stats, priorities [n, B])`."""

    cfg: RainbowConfig
    train_prioritized: Callable[[ReplayBatch], tuple[np.ndarray, np.ndarray]]

    def train_phase(
        self,
        buffer: ReplayBuffer,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
        step: int,
    ) -> np.ndarray | None:
        """n gradient steps, each on a batch sampled after the previous step's priorities were written back.
        Uniform replay samples all n batches at once, as DQN does (the same random draws)."""
        if not len(buffer):  # n-step returns: no transition complete yet
            return None
        if not isinstance(buffer, PrioritizedReplayBuffer):
            return super().train_phase(buffer, n, batch_size, rng, normalize, step)
        beta = self.cfg.beta(step)
        rows = []
        for _ in range(n):
            batch = buffer.sample(1, batch_size, rng, normalize, beta)
            stats, priorities = self.train_prioritized(batch)
            assert batch.indices is not None  # a prioritized sample's
            buffer.update_priorities(batch.indices, priorities)
            rows.append(stats)
        return np.mean(rows, axis=0)
