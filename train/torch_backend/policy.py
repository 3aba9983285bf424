"""Actor-critic MLP for PPO: separate actor and critic networks, as SB3's MlpPolicy for PPO.

Discrete actions: a categorical over the actor's logits. Box actions: a diagonal Gaussian whose mean is
the actor's output, in the [-1, 1]-scaled action space, with a state-independent learned log std;
the env action is unscale(clip(sample, -1, 1)).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.distributions import Categorical, Normal

_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def mlp(in_dim: int, hidden: list[int], out_dim: int, activation: str, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layer = nn.Linear(last, width)
        nn.init.orthogonal_(layer.weight, math.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers += [layer, _ACTIVATIONS[activation]()]
        last = width
    head = nn.Linear(last, out_dim)
    nn.init.orthogonal_(head.weight, out_gain)
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
        self.actor = mlp(obs_dim, net_arch, act_dim, activation, out_gain=0.01)
        self.critic = mlp(obs_dim, net_arch, 1, activation, out_gain=1.0)
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
