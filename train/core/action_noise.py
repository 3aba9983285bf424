"""The exploration processes of the training driver (TD3/DDPG exploration), stepping the formulas of
rl2edge.specs with the same float32 constants that the exported graph folds in (export.folded_noise)."""

from __future__ import annotations

import numpy as np

from rl2edge.specs import ou_step


class GaussianNoise:
    def __init__(self, sigma: float, act_dim: int, n_envs: int, rng: np.random.Generator):
        self.sigma, self.shape, self.rng = np.float32(sigma), (n_envs, act_dim), rng

    def __call__(self) -> np.ndarray:
        return self.sigma * self.rng.standard_normal(self.shape, dtype=np.float32)

    def reset(self, env_index: int) -> None:
        pass


class OUNoise:
    """SB3's OrnsteinUhlenbeckActionNoise (mean 0), one process per env, reset at episode ends."""

    def __init__(
        self, theta: float, sigma: float, dt: float, act_dim: int, n_envs: int, rng: np.random.Generator
    ):
        self.theta, self.sigma, self.dt = np.float32(theta), np.float32(sigma), np.float32(dt)
        self.rng, self.x = rng, np.zeros((n_envs, act_dim), np.float32)

    def __call__(self) -> np.ndarray:
        eps = self.rng.standard_normal(self.x.shape, dtype=np.float32)
        self.x = ou_step(self.x, eps, self.theta, self.sigma, self.dt)
        return self.x

    def reset(self, env_index: int) -> None:
        self.x[env_index] = 0.0
