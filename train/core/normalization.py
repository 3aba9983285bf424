"""Running observation normalization.

The statistics are float64 and updated during training; `normalize` is the one formula used in
training, evaluation and (as constants folded into the graph) deployment:

    clip((obs - mean) / sqrt(var + eps), -clip, clip)   in float32

so that the exported graph computes exactly what the policy was trained on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RunningNormalizer:
    shape: tuple[int, ...]
    clip: float = 10.0
    eps: float = 1e-8
    enabled: bool = True
    mean: np.ndarray = field(init=False)
    var: np.ndarray = field(init=False)
    count: float = field(init=False, default=1e-4)
    raw: np.ndarray | None = field(init=False, default=None)
    """Elements (a bool mask of `shape`) left as they are, neither normalized nor clipped: a Dict
    observation's keys outside SB3's VecNormalize `norm_obs_keys`. None: every element normalized."""

    def __post_init__(self) -> None:
        self.shape = tuple(self.shape)
        self.mean = np.zeros(self.shape, np.float64)
        self.var = np.ones(self.shape, np.float64)

    def update(self, batch: np.ndarray) -> None:
        """Parallel-variance update (Chan et al.), as in SB3's RunningMeanStd."""
        if not self.enabled:
            return
        batch = np.asarray(batch, np.float64).reshape(-1, *self.shape)
        # np.mean and np.var's own arithmetic (sum / n; the mean of squared deviations), without their
        # generic wrappers: this runs after every vector step of training
        b_count = batch.shape[0]
        b_mean = batch.sum(axis=0) / b_count
        dev = batch - b_mean
        b_var = (dev * dev).sum(axis=0) / b_count
        delta = b_mean - self.mean
        total = self.count + b_count
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.mean = self.mean + delta * b_count / total
        self.var = m2 / total
        self.count = total

    def constants(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, 1/std) as the float32 constants the graph folds in (0 and 1 where raw)."""
        if not self.enabled:
            return np.zeros(self.shape, np.float32), np.ones(self.shape, np.float32)
        mean = self.mean.astype(np.float32)
        inv_std = (1.0 / np.sqrt(self.var + self.eps)).astype(np.float32)
        if self.raw is not None:
            mean[self.raw], inv_std[self.raw] = 0.0, 1.0
        return mean, inv_std

    def clip_bounds(self) -> np.ndarray | None:
        """Per-element clip bounds (float32; the float32 maximum where raw) when some elements are raw,
        else None: the graph then clips with the one scalar `clip`."""
        if not self.enabled or self.raw is None:
            return None
        bounds = np.full(self.shape, self.clip, np.float32)
        bounds[self.raw] = np.finfo(np.float32).max
        return bounds

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        mean, inv_std = self.constants()
        out = (np.asarray(obs, np.float32) - mean) * inv_std
        if self.enabled:
            bounds = self.clip_bounds()
            out = np.clip(out, -self.clip, self.clip) if bounds is None else np.clip(out, -bounds, bounds)
        return out.astype(np.float32, copy=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "clip": self.clip,
            "eps": self.eps,
            "count": self.count,
            "mean": self.mean.tolist(),
            "var": self.var.tolist(),
        }

    @classmethod
    def from_dict(cls, shape: tuple[int, ...], d: dict[str, Any]) -> RunningNormalizer:
        norm = cls(shape=shape, clip=float(d["clip"]), eps=float(d["eps"]), enabled=bool(d["enabled"]))
        norm.count = float(d["count"])
        norm.mean = np.asarray(d["mean"], np.float64).reshape(shape)
        norm.var = np.asarray(d["var"], np.float64).reshape(shape)
        return norm


class RewardScaler:
    """Reward scaling for training only, as SB3's VecNormalize(norm_reward=True) does it: each env keeps a
    running discounted return R <- gamma R + r (reset at the episode's end); rewards are divided by the
    running std of R and clipped. Nothing of it is deployed (rewards never reach the policy), and episode
    returns in metrics and evaluations stay raw. It keeps a critic's targets near unit scale, where a
    return of -100 per episode would otherwise make the value loss swamp the policy gradient under
    max_grad_norm."""

    def __init__(self, n_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.returns = np.zeros(n_envs, np.float64)
        self.stats = RunningNormalizer(shape=(), clip=clip, eps=eps)
        self.gamma = float(gamma)

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """The scaled float32 rewards of one vector step; `dones` ends each finished env's return."""
        self.returns = self.returns * self.gamma + rewards
        self.stats.update(self.returns)
        scaled = np.clip(
            rewards / np.sqrt(self.stats.var + self.stats.eps), -self.stats.clip, self.stats.clip
        )
        self.returns[np.asarray(dones, bool)] = 0.0
        return scaled.astype(np.float32)
