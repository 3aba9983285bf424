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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributions import Categorical, Normal

from rl2edge.train.core.encoder_spec import features_dim
from rl2edge.train.core.network_spec import EncoderSpec, NetworkSpec
from rl2edge.train.torch_backend.encoder import ObsEncoder

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


def run_mlp(seq: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """seq(x) without nn.Module's call machinery (hooks, tracing checks): PPO runs these small nets
    some 10^5 times a run, where that machinery cost as much as the arithmetic. No layer here has hooks."""
    for layer in seq:
        x = layer.forward(x)
    return x


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_'s arithmetic (the same ops, so the same bits) without its per-call
    wrappers and checks: one norm per tensor, their norm, and one scale of every gradient."""
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


@dataclass
class ActionTerms:
    """ActorCritic.action_terms: per-sample log-prob and entropy, and the distribution's intermediates."""

    logp: torch.Tensor  # [B]
    entropy: torch.Tensor  # [B]
    logp_all: torch.Tensor | None = None  # categorical: log-softmax of the logits [B, n]
    z: torch.Tensor | None = None  # Gaussian: (action - mean) / std [B, A]


class ActorCritic(nn.Module):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: bool,
        net_arch: list[int],
        activation: str = "tanh",
        log_std_init: float = 0.0,
        encoder: EncoderSpec | None = None,
        nvec: tuple[int, ...] | None = None,
    ):
        """`encoder`: the network spec's encoder (image keys, train.core.encoder_spec), shared by the actor
        and the critic as SB3's on-policy policies share their features extractor; None: the MLPs take
        the observation itself. `nvec`: a MultiDiscrete action's choices per component; the actor's
        output is then one categorical head per component (act_dim = sum(nvec)), actions [B, components]."""
        super().__init__()
        self.discrete, self.nvec = discrete, (None if nvec is None else tuple(int(n) for n in nvec))
        in_dim = obs_dim if encoder is None else features_dim(encoder)
        self.actor = mlp(in_dim, net_arch, activation, act_dim, orthogonal_gain=0.01)
        self.critic = mlp(in_dim, net_arch, activation, 1, orthogonal_gain=1.0)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))
        # made last: the MLPs draw their initial weights as they always have for a seed
        self.encoder = None if encoder is None else ObsEncoder(encoder, orthogonal=True)

    @classmethod
    def from_network_spec(cls, spec: NetworkSpec) -> ActorCritic:
        return cls(
            spec.obs_dim,
            spec.act_dim,
            spec.is_discrete,
            list(spec.net_arch),
            spec.activation,
            (spec.log_std_init or 0.0),
            spec.encoder,
            spec.action_nvec,
        )

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the actor and the critic take: the observation, or its encoder's features."""
        return obs if self.encoder is None else self.encoder(obs)

    def distribution(self, obs: torch.Tensor) -> Categorical | Normal:
        out = self.actor(self.features(obs))
        if self.nvec is not None:
            raise ValueError("a multi-discrete actor has one Categorical per component: use action_terms")
        if self.discrete:
            return Categorical(logits=out, validate_args=False)
        return Normal(out, self.log_std.exp().expand_as(out), validate_args=False)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._value(self.features(obs))

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        return run_mlp(self.critic, features).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample during the rollout, returning what the update needs: action, log-prob, value. `noise` is
        the sample's randomness, drawn per env by the caller (train.core.rollout_collector): Gumbel noise
        (argmax(logits + g) samples the softmax) or standard normal (mean + std * eps)."""
        h = self.features(obs)
        out = run_mlp(self.actor, h)
        if self.nvec is not None:
            action = torch.stack(
                [
                    (o + g).argmax(-1)
                    for o, g in zip(out.split(self.nvec, -1), noise.split(self.nvec, -1), strict=True)
                ],
                -1,
            )
            logp = self.action_terms(out, action).logp
        elif self.discrete:
            action = (out + noise).argmax(-1)
            logp = out.log_softmax(-1).gather(-1, action[:, None])[:, 0]
        else:
            action = out + self.log_std.exp() * noise
            logp = (
                Normal(out, self.log_std.exp().expand_as(out), validate_args=False).log_prob(action).sum(-1)
            )
        return action, logp, self._value(h)

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.features(obs)
        terms = self.action_terms(run_mlp(self.actor, h), actions)
        return terms.logp, terms.entropy, self._value(h)

    def action_terms(self, out: torch.Tensor, actions: torch.Tensor) -> ActionTerms:
        """Log-prob and entropy of `actions` under the distribution of the actor's output `out`, with
        the intermediates a written-out backward reuses (train.torch_backend.actor_critic_grad). The
        distributions' formulas written out (torch.distributions builds objects and checks per call):
        the categorical's log-softmax, gathered, and its entropy; the diagonal Gaussian's log-density and
        entropy summed over the action's dimensions. A multi-discrete action: each component's categorical
        on its slice of `out`, log-probs and entropies summed (no `logp_all`: autograd differentiates it)."""
        if self.nvec is not None:
            logp_parts, entropy_parts = [], []
            for i, part in enumerate(out.split(self.nvec, -1)):
                logp_all = part.log_softmax(-1)
                logp_parts.append(logp_all.gather(-1, actions[:, i : i + 1])[:, 0])
                entropy_parts.append(-(logp_all.exp() * logp_all).sum(-1))
            return ActionTerms(torch.stack(logp_parts, -1).sum(-1), torch.stack(entropy_parts, -1).sum(-1))
        if self.discrete:
            logp_all = out.log_softmax(-1)
            logp = logp_all.gather(-1, actions[:, None])[:, 0]
            return ActionTerms(logp, -(logp_all.exp() * logp_all).sum(-1), logp_all=logp_all)
        log_std = self.log_std.expand_as(out)
        z = (actions - out) * torch.exp(-log_std)
        logp = (-0.5 * z * z - log_std - 0.5 * LOG_2PI).sum(-1)
        return ActionTerms(logp, (0.5 + 0.5 * LOG_2PI + log_std).sum(-1), z=z)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """Argmax index (discrete) or the Gaussian mean in scaled units (Box): the exported head's input."""
        out = self.actor(self.features(obs))
        if self.nvec is not None:
            return torch.stack([part.argmax(-1) for part in out.split(self.nvec, -1)], -1)
        return out.argmax(-1) if self.discrete else out


class EncodedActor(nn.Module):
    """An actor-critic's deployable actor when it has an encoder: the encoder, then the actor's MLP."""

    def __init__(self, encoder: nn.Module, actor: nn.Sequential):
        super().__init__()
        self.encoder, self.actor = encoder, actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.encoder(obs))


@torch.no_grad()
def polyak_update(source: Iterable[nn.Parameter], target: Iterable[nn.Parameter], tau: float) -> None:
    """target <- target + tau * (source - target); tau == 1 copies exactly."""
    src, tgt = list(source), list(target)
    if tau == 1.0:
        torch._foreach_copy_(tgt, src)
    else:
        torch._foreach_lerp_(tgt, src, tau)


def obs_encoder(spec: NetworkSpec) -> ObsEncoder | None:
    """An off-policy network's own encoder (image keys; SB3's off-policy networks do not share theirs),
    PyTorch's default init; None without image keys."""
    return None if spec.encoder is None else ObsEncoder(spec.encoder)


def obs_width(spec: NetworkSpec) -> int:
    """What a network's first layer takes: the observation, or its encoder's features."""
    return spec.obs_dim if spec.encoder is None else features_dim(spec.encoder)


def encoded(encoder: nn.Module | None, obs: torch.Tensor) -> torch.Tensor:
    return obs if encoder is None else encoder(obs)


class SACActor(nn.Module):
    def __init__(self, spec: NetworkSpec):
        super().__init__()
        hidden = list(spec.net_arch)
        self.latent = mlp(obs_width(spec), hidden, spec.activation)
        self.mu = nn.Linear(hidden[-1], spec.act_dim)
        self.log_std = nn.Linear(hidden[-1], spec.act_dim)
        self.log_std_min, self.log_std_max = (
            float(spec.required("log_std_min")),
            float(spec.required("log_std_max")),
        )
        self.encoder = obs_encoder(spec)  # made last: the MLPs draw their weights as they always have

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The Gaussian's mean, before tanh: the deterministic head's input."""
        return self.mu(self.latent(encoded(self.encoder, obs)))

    def mean_log_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.latent(encoded(self.encoder, obs))
        return self.mu(h), self.log_std(h).clamp(self.log_std_min, self.log_std_max)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized squashed sample in [-1, 1] and its log-probability (with tanh's correction)."""
        action, logp, _, _ = self.squash(*self.mean_log_std(obs))
        return action, logp

    @staticmethod
    def squash(
        mean: torch.Tensor, log_std: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The sample, its log-probability, and the std and noise it was drawn with (the written-out
        gradient's backward reuses them): tanh(mean + std eps), eps one draw of standard normal noise."""
        eps = torch.randn_like(mean)
        std = log_std.exp()
        action = torch.tanh(mean + std * eps)
        logp = (-0.5 * eps.square() - log_std - 0.5 * LOG_2PI).sum(-1)
        logp = logp - torch.log(1.0 - action.square() + 1e-6).sum(-1)  # SB3's epsilon
        return action, logp, std, eps


class TD3Actor(nn.Module):
    def __init__(self, spec: NetworkSpec):
        super().__init__()
        self.net = mlp(obs_width(spec), list(spec.net_arch), spec.activation, spec.act_dim)
        self.encoder = obs_encoder(spec)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(encoded(self.encoder, obs)))


class Critics(nn.Module):
    """n independent Q(obs, action) networks; with image keys, one encoder that all n share (SB3's
    critic shares its features extractor among its Q-networks)."""

    def __init__(self, spec: NetworkSpec, n: int):
        super().__init__()
        in_dim = obs_width(spec) + spec.act_dim
        self.qs = nn.ModuleList(mlp(in_dim, list(spec.net_arch), spec.activation, 1) for _ in range(n))
        self.encoder = obs_encoder(spec)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> list[torch.Tensor]:
        x = torch.cat([encoded(self.encoder, obs), action], dim=-1)
        return [q(x).squeeze(-1) for q in self.qs]

    def first(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q_1 alone (TD3's actor loss), without the other critics' forward passes."""
        return self.qs[0](torch.cat([encoded(self.encoder, obs), action], dim=-1)).squeeze(-1)


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """The module's parameters out of autograd for a block. A loss that passes through a network it does
    not train (the actor's loss through the critics) then gets the input gradients it needs and no weight
    gradients for that network: SAC's actor step does 2 of its critics' 256x256 weight-gradient matmuls
    fewer (TF's tape.gradient(actor_loss, actor_vars) prunes them the same way)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class QNetwork(nn.Module):
    def __init__(self, spec: NetworkSpec):
        super().__init__()
        self.net = mlp(obs_width(spec), list(spec.net_arch), spec.activation, spec.act_dim)
        self.encoder = obs_encoder(spec)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(encoded(self.encoder, obs))


class NoisyLinear(nn.Module):
    """Factorized-Gaussian noisy linear layer (Fortunato et al. 2018): w = mu_w + sigma_w * (f(e_out) f(e_in)^T),
    b = mu_b + sigma_b * f(e_out), f(x) = sign(x) sqrt|x|. `forward(x)` uses the mean weights (what export
    freezes); `forward(x, noisy=True)` the current noise, which `reset_noise` redraws. The noise vectors
    are buffers outside the state dict: a checkpoint holds mu and sigma only."""

    def __init__(self, in_features: int, out_features: int, sigma0: float):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)

    @staticmethod
    def _f(x: torch.Tensor) -> torch.Tensor:
        return x.sign() * x.abs().sqrt()

    @torch.no_grad()
    def reset_noise(self) -> None:
        self.eps_in.copy_(self._f(torch.randn(self.in_features, device=self.eps_in.device)))
        self.eps_out.copy_(self._f(torch.randn(self.out_features, device=self.eps_out.device)))

    def forward(self, x: torch.Tensor, noisy: bool = False) -> torch.Tensor:
        if not noisy:
            return nn.functional.linear(x, self.weight_mu, self.bias_mu)
        weight = self.weight_mu + self.weight_sigma * torch.outer(self.eps_out, self.eps_in)
        return nn.functional.linear(x, weight, self.bias_mu + self.bias_sigma * self.eps_out)


class _Stream(nn.Module):
    """hidden -> activation -> output, plain or noisy linear layers (a Rainbow head)."""

    def __init__(self, in_dim: int, width: int, out_dim: int, activation: str, noisy: bool, sigma0: float):
        super().__init__()
        make = (lambda i, o: NoisyLinear(i, o, sigma0)) if noisy else nn.Linear
        self.hidden, self.act, self.out = (
            make(in_dim, width),
            _ACTIVATIONS[activation](),
            make(width, out_dim),
        )
        self.noisy = noisy

    def forward(self, x: torch.Tensor, noisy: bool = False) -> torch.Tensor:
        if not self.noisy:
            return self.out(self.act(self.hidden(x)))
        return self.out(self.act(self.hidden(x, noisy)), noisy)


class RainbowQNetwork(nn.Module):
    """Rainbow's Q-network: a plain MLP trunk (all hidden layers but the last), then the head streams,
    each its last hidden layer and an output layer (noisy when `noisy`): advantages [A x atoms] and, when
    dueling, a value [atoms] aggregated as V + A - mean_a A. With C51 the atoms are logits of a
    categorical over `support`; without, one atom is the Q-value. `forward` is the expected Q with the
    mean weights: what the exported graph computes before its argmax. With every switch off the layers
    are DQN's QNetwork's, made in the same order (the same seed gives the same weights)."""

    def __init__(self, spec: NetworkSpec):
        super().__init__()
        hidden, activation = list(spec.net_arch), spec.activation
        self.n_actions, self.n_atoms = int(spec.act_dim), int(spec.required("n_atoms"))
        self.distributional, self.dueling = (
            bool(spec.required("distributional")),
            bool(spec.required("dueling")),
        )
        noisy, sigma0 = (
            bool(spec.required("noisy")),
            float(0.5 if spec.noisy_sigma0 is None else spec.noisy_sigma0),
        )
        self.trunk = mlp(obs_width(spec), hidden[:-1], activation)
        last = hidden[-2] if len(hidden) > 1 else obs_width(spec)
        self.advantage = _Stream(last, hidden[-1], self.n_actions * self.n_atoms, activation, noisy, sigma0)
        if self.dueling:
            self.value = _Stream(last, hidden[-1], self.n_atoms, activation, noisy, sigma0)
        self.register_buffer(
            "support",
            torch.linspace(float(spec.required("v_min")), float(spec.required("v_max")), self.n_atoms),
            persistent=False,
        )
        self._noisy_layers: list[NoisyLinear] | None = None
        self.encoder = obs_encoder(spec)  # plain layers: the noise stays in the head streams, as in Rainbow

    def reset_noise(self) -> None:
        if self._noisy_layers is None:  # found once: walking the modules costs more than the draw
            self._noisy_layers = [m for m in self.modules() if isinstance(m, NoisyLinear)]
        for m in self._noisy_layers:
            m.reset_noise()

    def logits(self, obs: torch.Tensor, noisy: bool = False) -> torch.Tensor:
        """[B, A, atoms]: the dueling-aggregated atoms (logits with C51, else one Q-value per action)."""
        h = self.trunk(encoded(self.encoder, obs))
        adv = self.advantage(h, noisy).view(-1, self.n_actions, self.n_atoms)
        if not self.dueling:
            return adv
        value = self.value(h, noisy).view(-1, 1, self.n_atoms)
        return value + adv - adv.mean(1, keepdim=True)

    def expected_q(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.distributional:
            return logits.squeeze(-1)
        return (logits.softmax(-1) * self.support).sum(-1)

    def forward(self, obs: torch.Tensor, noisy: bool = False) -> torch.Tensor:
        return self.expected_q(self.logits(obs, noisy))


def project_distribution(
    probs: torch.Tensor, rewards: torch.Tensor, discounts: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """C51's projection (Bellemare et al. 2017, Algorithm 1), batched: the distribution of
    r + discount * Z (discount 0 at termination) onto the fixed support, each atom's mass split between
    its two neighbours in proportion to distance; values outside [v_min, v_max] land on the ends. The
    sum over neighbours is a one-hot product (no scatter), the same op in both backends."""
    n_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (n_atoms - 1)
    tz = (rewards[:, None] + discounts[:, None] * support[None, :]).clamp(v_min, v_max)
    b = (tz - v_min) / delta
    lower, upper = b.floor(), b.ceil()
    m_lower = probs * (upper - b + (upper == lower).to(probs.dtype))  # b on an atom: all mass there
    m_upper = probs * (b - lower)
    eye = nn.functional.one_hot
    return torch.einsum("bk,bkj->bj", m_lower, eye(lower.long(), n_atoms).to(probs.dtype)) + torch.einsum(
        "bk,bkj->bj", m_upper, eye(upper.long().clamp(max=n_atoms - 1), n_atoms).to(probs.dtype)
    )
