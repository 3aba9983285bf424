"""Exploration noise in the exported graph.

The graph holds the whole noise process: its scale, OU's state update, the clip to the bounds, the
squashing of SAC's own distribution, the unscale to the PLC's units. What it takes from outside is only
the entropy: a standard-normal draw per action dimension, as an explicit input `noise`, which the
runtime fills from its own seeded generator (the seed is in the manifest and can be overridden on the
device). OU also takes its state as the input `ou_state` and returns the next one as `ou_state_out`,
which the runtime feeds back as every state of an artifact (runtime.state): `episode_start` = 1 zeroes it.
Feeding zeros switches exploration off, and then the graph computes exactly, bit for bit, the
deterministic head (checked at export).

In [-1, 1]-scaled units, with s the deterministic head's scaled action and eps ~ N(0, 1):

    gaussian:  a = clip(s + sigma * eps, -1, 1)
    ou:        x = ou_state (1 - episode_start);  x' = x - (theta dt) x + (sigma sqrt(dt)) eps;  a = clip(s + x', -1, 1)
    policy:    SAC: a = tanh(mean + exp(log_std) * eps);  PPO: a = clip(mean + exp(log_std) * eps, -1, 1)

then action = center + a * half_range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.export.deployable import DeployablePolicy
from rl2edge.specs import NoiseSpec, ou_constants


class NoisyPolicy(nn.Module):
    """The deployable graph with folded noise: forward(obs, noise[, episode_start, ou_state]) -> action[,
    ou_state_out]."""

    def __init__(self, base: DeployablePolicy, spec: NoiseSpec):
        super().__init__()
        self.base, self.spec = base, spec
        if spec.kind == "ou":
            decay, scale = ou_constants(spec.theta, spec.sigma, spec.dt)
            self.register_buffer("ou_decay", torch.tensor(decay))
            self.register_buffer("ou_scale", torch.tensor(scale))
        else:
            self.register_buffer("sigma", torch.tensor(np.float32(spec.sigma)))

    def forward(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor,
        episode_start: torch.Tensor | None = None,
        ou_state: torch.Tensor | None = None,
    ) -> Any:
        base = self.base
        if self.spec.kind == "policy":
            return base.unscale(self.policy_sample(obs, noise))
        scaled = base.squash(base.pre_head(obs))
        if self.spec.kind == "gaussian":
            return base.unscale((scaled + self.sigma * noise).clamp(-1.0, 1.0))
        assert ou_state is not None and episode_start is not None
        x = ou_state * (1.0 - episode_start)
        x = x - self.ou_decay * x + self.ou_scale * noise
        return base.unscale((scaled + x).clamp(-1.0, 1.0)), x

    def policy_sample(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.distribution(obs)
        pre = mean + log_std.exp() * noise
        return torch.tanh(pre) if self.base.head == "tanh_unscale" else pre.clamp(-1.0, 1.0)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy's Gaussian (before squashing): mean and log std."""
        base = self.base
        if hasattr(base.actor, "mean_log_std"):  # SAC
            return base.actor.mean_log_std(base.normalized(obs))
        mean = base.pre_head(obs)
        return mean, base.actor.log_std.expand_as(mean)  # PPO


def example_inputs(
    spec: NoiseSpec | None, obs_shape: tuple[int, ...], act_dim: int
) -> tuple[torch.Tensor, ...]:
    obs = torch.zeros((1, *obs_shape), dtype=torch.float32)
    if spec is None:
        return (obs,)
    noise = torch.zeros((1, act_dim), dtype=torch.float32)
    return (obs, noise, torch.zeros((1, 1)), noise.clone()) if spec.kind == "ou" else (obs, noise)
