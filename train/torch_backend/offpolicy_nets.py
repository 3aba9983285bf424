"""Networks of the off-policy algorithms, as SB3 builds them for MlpPolicy (PyTorch's default
initialization, ReLU): SAC's squashed Gaussian actor, TD3/DDPG's tanh actor, Q-critics on
(observation, action), DQN's Q-network; and the polyak update that every target network uses.

Every actor's `forward` is what the exported graph's head takes: SAC's mean (the head applies tanh and
the unscale), TD3's tanh output (the head unscales), DQN's Q-values (the head takes the argmax).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
LOG_2PI = math.log(2 * math.pi)


def mlp(in_dim: int, hidden: list[int], activation: str, out_dim: int | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), _ACTIVATIONS[activation]()]
        last = width
    if out_dim is not None:
        layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


@torch.no_grad()
def polyak_update(source: Iterable[nn.Parameter], target: Iterable[nn.Parameter], tau: float) -> None:
    """target <- target + tau * (source - target); tau == 1 copies exactly."""
    src, tgt = list(source), list(target)
    if tau == 1.0:
        torch._foreach_copy_(tgt, src)
    else:
        torch._foreach_lerp_(tgt, src, tau)


class SACActor(nn.Module):
    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        hidden = list(spec["net_arch"])
        self.latent = mlp(spec["obs_dim"], hidden, spec["activation"])
        self.mu = nn.Linear(hidden[-1], spec["act_dim"])
        self.log_std = nn.Linear(hidden[-1], spec["act_dim"])
        self.log_std_min, self.log_std_max = float(spec["log_std_min"]), float(spec["log_std_max"])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The Gaussian's mean, before tanh: the deterministic head's input."""
        return self.mu(self.latent(obs))

    def mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.latent(obs)
        return self.mu(h), self.log_std(h).clamp(self.log_std_min, self.log_std_max)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized squashed sample in [-1, 1] and its log-probability (with tanh's correction)."""
        mean, log_std = self.mean_log_std(obs)
        eps = torch.randn_like(mean)
        pre = mean + log_std.exp() * eps
        action = torch.tanh(pre)
        logp = (-0.5 * eps.square() - log_std - 0.5 * LOG_2PI).sum(-1)
        logp = logp - torch.log(1.0 - action.square() + 1e-6).sum(-1)  # SB3's epsilon
        return action, logp


class TD3Actor(nn.Module):
    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        self.net = mlp(spec["obs_dim"], list(spec["net_arch"]), spec["activation"], spec["act_dim"])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class Critics(nn.Module):
    """n independent Q(obs, action) networks."""

    def __init__(self, spec: dict[str, Any], n: int):
        super().__init__()
        in_dim = spec["obs_dim"] + spec["act_dim"]
        self.qs = nn.ModuleList(mlp(in_dim, list(spec["net_arch"]), spec["activation"], 1) for _ in range(n))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return [q(x).squeeze(-1) for q in self.qs]


class QNetwork(nn.Module):
    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        self.net = mlp(spec["obs_dim"], list(spec["net_arch"]), spec["activation"], spec["act_dim"])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


def actor_from_spec(spec: dict[str, Any]) -> nn.Module:
    """The module under the checkpoint's 'actor.' (SAC, TD3) or 'q_net.' (DQN) keys."""
    kind = spec.get("type")
    if kind == "sac_mlp":
        return SACActor(spec)
    if kind == "td3_mlp":
        return TD3Actor(spec)
    if kind == "dqn_mlp":
        return QNetwork(spec)
    raise ValueError(f"unknown off-policy network type {kind!r}")


ACTOR_PREFIX = {"sac_mlp": "actor.", "td3_mlp": "actor.", "dqn_mlp": "q_net."}
