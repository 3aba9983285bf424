"""DQN's side of the off-policy driver, framework-neutral: epsilon-greedy exploration, the target network's
period, the epsilon column. Mixed into TorchDQN and TFDQN (and, through them, both Rainbows, whose
prioritized training phase is train.core.rainbow_hooks') ahead of their backend's agent base."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl2edge.train.core.offpolicy_agent import OffPolicyAgentBase
from rl2edge.train.core.offpolicy_config import DQNConfig


class DQNHooks(OffPolicyAgentBase):
    """Needs the agent's `cfg`, `n_actions`, `explore` and `update_target` (its backend's)."""

    cfg: DQNConfig
    n_actions: int
    """Discrete actions (the network's act_dim); the agent sets it."""
    update_target: Callable[[], None]

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
