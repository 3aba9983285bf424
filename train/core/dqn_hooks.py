"""DQN's and Rainbow's side of the off-policy driver, framework-neutral: epsilon-greedy exploration, the
target network's period, the epsilon column, and Rainbow's prioritized training phase. Mixed into
TorchDQN and TFDQN (and, through them, both Rainbows) ahead of their backend's agent base."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl2edge.train.core.offpolicy_agent import OffPolicyAgentBase
from rl2edge.train.core.offpolicy_config import DQNConfig, RainbowConfig
from rl2edge.train.core.replay import PrioritizedReplayBuffer, ReplayBuffer


class DQNHooks(OffPolicyAgentBase):
    """Needs the agent's `cfg`, `n_actions`, `explore` and `update_target` (its backend's)."""

    cfg: DQNConfig
    n_actions: int
    """Discrete actions (the network's act_dim); the agent sets it."""

    def act(self, obs_norm: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
        # greedy (Rainbow's explore draws its noisy layers' noise), then epsilon's draws: this order
        action = self.explore(obs_norm).astype(np.int64)
        explore = rng.random(len(obs_norm)) < self.cfg.epsilon(step)
        action[explore] = rng.integers(0, self.n_actions, size=int(explore.sum()))
        return action

    def after_env_step(self, iteration: int) -> None:
        # target_update_interval counts env steps (SB3's unit), all envs together
        period = max(self.cfg.target_update_interval // self.cfg.n_envs, 1)
        if (iteration + 1) % period == 0:
            self.update_target()

    def log_row(self, step: int) -> dict[str, float]:
        return {"epsilon": self.cfg.epsilon(step)}


class RainbowHooks(DQNHooks):
    """Needs, beyond DQN's, the agent's `train_prioritized(batch) -> (mean stats, priorities [n, B])`."""

    cfg: RainbowConfig

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
            buffer.update_priorities(batch.indices, priorities)
            rows.append(stats)
        return np.mean(rows, axis=0)
