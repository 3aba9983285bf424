"""Every network of the torch backend, built with one MLP builder, as SB3 builds them for MlpPolicy.

PPO (`ActorCritic`): separate actor and critic, orthogonal init (gain sqrt(2), the heads 0.01 and 1).
Discrete actions: a categorical over the actor's logits. Box actions: a diagonal Gaussian whose mean is the
actor's output, in the [-1, 1]-scaled action space, with a state-independent learned log std; the env
action is unscale(clip(sample, -1, 1)).

Off-policy (PyTorch's default init, ReLU): SAC's squashed Gaussian actor, TD3/DDPG's tanh actor,
Q-critics on (observation, action), DQN's Q-network; and the polyak update every target network uses.
Every actor's `forward` is what the exported graph's head takes: SAC's mean (the head applies tanh and
the unscale), TD3's tanh output (the head unscales), DQN's Q-values (the head takes the argmax).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical, Normal

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
LOG_2PI = math.log(2 * math.pi)


def mlp(
    in_dim: int,
    hidden: list[int],
    activation: str,
    out_dim: int | None = None,
    orthogonal_gain: float | None = None,
) -> nn.Sequential:
    """Linear + activation per hidden width, then a linear head of `out_dim` (none if None). With
    `orthogonal_gain`, PPO's init: orthogonal weights (gain sqrt(2), the head's `orthogonal_gain`) and
    zero biases, each layer right after it is made (the order of the random draws is part of the seed's
    contract); else PyTorch's default init."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layer = nn.Linear(last, width)
        if orthogonal_gain is not None:
            nn.init.orthogonal_(layer.weight, math.sqrt(2))
            nn.init.zeros_(layer.bias)
        layers += [layer, _ACTIVATIONS[activation]()]
        last = width
    if out_dim is not None:
        head = nn.Linear(last, out_dim)
        if orthogonal_gain is not None:
            nn.init.orthogonal_(head.weight, orthogonal_gain)
            nn.init.zeros_(head.bias)
        layers.append(head)
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: bool,
        net_arch: list[int],
        activation: str = "tanh",
        log_std_init: float = 0.0,
    ):
        super().__init__()
        self.discrete = discrete
        self.actor = mlp(obs_dim, net_arch, activation, act_dim, orthogonal_gain=0.01)
        self.critic = mlp(obs_dim, net_arch, activation, 1, orthogonal_gain=1.0)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    @classmethod
    def from_network_spec(cls, spec: dict[str, Any]) -> ActorCritic:
        return cls(
            spec["obs_dim"],
            spec["act_dim"],
            spec["discrete"],
            list(spec["net_arch"]),
            spec["activation"],
            spec.get("log_std_init", 0.0),
        )

    def distribution(self, obs: torch.Tensor) -> Categorical | Normal:
        out = self.actor(obs)
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample during the rollout, returning what the update needs: action, log-prob, value."""
        dist = self.distribution(obs)
        action = dist.sample()
        logp = dist.log_prob(action)
        if not self.discrete:
            logp = logp.sum(-1)
        return action, logp, self.value(obs)

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = self.distribution(obs)
        logp, entropy = dist.log_prob(actions), dist.entropy()
        if not self.discrete:
            logp, entropy = logp.sum(-1), entropy.sum(-1)
        return logp, entropy, self.value(obs)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Argmax index (discrete) or the Gaussian mean in scaled units (Box): the exported head's input."""
        out = self.actor(obs)
        return out.argmax(-1) if self.discrete else out


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
