"""The written-out actor-critic gradient (train/torch_backend/actor_critic_grad.py) against autograd
through the same loss (TorchPPO.loss / TorchA2C.loss), for every network and loss option it covers.

Tolerance: both compute the same products in float32 but sum them in different orders (the log std's
and the biases' sums over the batch, the log-softmax's backward written as two ops), so each gradient
may differ from autograd's by a few ulps of its largest summands: rtol 1e-5 and atol 5e-6 of the
tensor's largest entry (measured over 72 networks, losses and seeds: at most 4.6e-7 of it; one sample's term in a
batch of 256 is of order 4e-3 of it). The inputs put a third to two thirds of the samples beyond the
clip range, so both branches of the clipped surrogate and of the value clip carry weight.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rl2edge.train.core.config import PPOConfig
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.torch_backend.actor_critic_grad import ActorCriticGrad, ForwardPass
from rl2edge.train.torch_backend.nets import ActionTerms
from rl2edge.train.torch_backend.optim_step import clear_grads
from rl2edge.train.torch_backend.ppo import TorchPPO, clipped_surrogate, ppo_grads
from testkit.agents import make_agent, network

B, CLIP = 256, 0.2


def _network(discrete: bool, activation: str, net_arch: list[int]) -> dict:
    """PPO's and A2C's network (one type), 5 observations, 3 actions (or 3 logits)."""
    return network(
        "ppo", 5, 3, discrete=discrete, net_arch=net_arch, activation=activation, log_std_init=-0.3
    )


def _agent(algo: str, net: dict, seed: int = 0, **overrides: object) -> TorchPPO:
    """A torch PPO or A2C agent on its defaults (no preset) and `overrides`."""
    agent = make_agent(algo, "torch", net, None, seed, **overrides)
    with torch.no_grad():  # away from PPO's init (an almost uniform policy, the value head near zero)
        for p in agent.params:
            p.add_(torch.randn_like(p) * 0.3)
    return agent


def _minibatch(agent: TorchPPO, rng: np.random.Generator) -> Minibatch:
    """Samples whose recorded log-probs and values are the current ones, moved: ratios of exp(+-0.4)
    against a clip range of 0.2, values 0.5 away against a value clip of 0.2."""
    obs = rng.standard_normal((B, 5)).astype(np.float32)
    if agent.policy.discrete:
        actions = rng.integers(0, 3, B)
    else:
        actions = rng.standard_normal((B, 3)).astype(np.float32)
    with torch.no_grad():
        logp, _, values = agent.policy.evaluate_actions(torch.as_tensor(obs), torch.as_tensor(actions))
    f32 = lambda x: x.astype(np.float32)  # noqa: E731
    return Minibatch(
        obs=obs,
        actions=actions,
        old_logprobs=f32(logp.numpy() + rng.uniform(-0.4, 0.4, B)),
        old_values=f32(values.numpy() + rng.uniform(-0.5, 0.5, B)),
        advantages=f32(rng.standard_normal(B)),
        returns=f32(values.numpy() + rng.standard_normal(B)),
    )


def _autograd(agent: TorchPPO, mb: Minibatch) -> tuple[list[torch.Tensor], torch.Tensor]:
    loss, stats = agent.loss(mb, CLIP)
    clear_grads(agent.optimizer)
    loss.backward()
    return [p.grad.clone() for p in agent.params], stats


def _assert_same_grads(agent: TorchPPO, mb: Minibatch) -> None:
    expected, expected_stats = _autograd(agent, mb)
    for p in agent.params:  # a gradient the written-out path failed to write would show, not pass
        p.grad.fill_(float("nan"))
    stats = agent.written_out_grads(mb, CLIP)
    names = [name for name, _ in agent.policy.named_parameters()]
    for name, p, want in zip(names, agent.params, expected, strict=True):
        assert float(want.abs().max()) > 0, name  # every parameter takes part in this loss
        torch.testing.assert_close(p.grad, want, rtol=1e-5, atol=5e-6 * float(want.abs().max()), msg=name)
    torch.testing.assert_close(stats, expected_stats, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
@pytest.mark.parametrize(
    ("activation", "net_arch", "clip_range_vf", "ent_coef", "vf_coef"),
    [
        ("tanh", [64, 64], None, 0.0, 0.5),
        ("tanh", [64, 64], 0.2, 0.01, 0.3),
        ("relu", [32], 0.2, 0.05, 0.7),
        ("tanh", [], None, 0.01, 0.3),  # no hidden layer: both heads linear in the observation
    ],
)
def test_ppo_gradient_matches_autograd(
    discrete: bool,
    activation: str,
    net_arch: list[int],
    clip_range_vf: float | None,
    ent_coef: float,
    vf_coef: float,
) -> None:
    agent = _agent(
        "ppo",
        _network(discrete, activation, net_arch),
        clip_range_vf=clip_range_vf,
        ent_coef=ent_coef,
        vf_coef=vf_coef,
    )
    mb = _minibatch(agent, np.random.default_rng(1))
    stats = agent.written_out_grads(mb, CLIP)
    assert 0.3 < float(stats[4]) < 0.7  # the fraction clipped: both branches of the surrogate in play
    _assert_same_grads(agent, mb)


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
def test_a2c_gradient_matches_autograd(discrete: bool) -> None:
    agent = _agent("a2c", _network(discrete, "tanh", [64, 64]), ent_coef=0.01, vf_coef=0.3)
    _assert_same_grads(agent, _minibatch(agent, np.random.default_rng(2)))


def test_training_through_either_gradient_ends_at_the_same_weights() -> None:
    """40 Adam steps with gradient clipping (max_grad_norm 0.5, active here) on three minibatches: the
    two paths' weights stay within 1e-5 (their gradients differ by float32 rounding each step and Adam
    divides by the gradient's running magnitude; measured 0.6-1.2e-7 over three seeds)."""
    overrides = {"clip_range_vf": 0.2, "ent_coef": 0.01}
    net = _network(True, "tanh", [64, 64])
    written, reference = _agent("ppo", net, **overrides), _agent("ppo", net, **overrides)
    reference.autograd = True
    rng = np.random.default_rng(3)
    mbs = [_minibatch(written, rng) for _ in range(3)]
    for i in range(40):
        written.train_step(mbs[i % 3], CLIP)
        reference.train_step(mbs[i % 3], CLIP)
    for (name, a), b in zip(written.policy.named_parameters(), reference.params, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=name)
    start = _agent("ppo", net, **overrides).params
    moved = max(float((a - b).abs().max()) for a, b in zip(written.params, start, strict=True))
    assert moved > 1e-3  # the steps did move the weights (Adam: at most ~1e-2 in 40 steps of 3e-4)


@pytest.mark.parametrize("clip", [0.2, 0.0], ids=["clip", "clip-annealed-to-0"])
def test_ppo_gradient_at_ties_and_zero_advantages(clip: float) -> None:
    """The surrogate's edge cases against autograd through clipped_surrogate: ratios of exactly 1 (the
    first minibatch of every update; with the clip range annealed to 0 the range is the point 1), zero
    advantages, and ratios just inside and beyond the bounds, each with either sign of advantage."""
    log_ratio = torch.tensor([0.0, 0.0, 0.0, 0.15, -0.15, 0.4, -0.4, 0.4, -0.4, 0.0])
    adv = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, 2.0])
    old_logp = torch.full((10,), -0.7)
    logp = (old_logp + log_ratio).requires_grad_()
    clipped_surrogate(adv, (logp - old_logp).exp(), clip).backward()
    terms = ActionTerms(logp.detach(), torch.zeros(10))
    fwd = ForwardPass(terms, torch.zeros(10), torch.zeros(10, dtype=torch.long), [], [])
    (g_logp, _, _), _ = ppo_grads(fwd, old_logp, old_logp, adv, torch.zeros(10), clip, PPOConfig())
    torch.testing.assert_close(g_logp, logp.grad, rtol=1e-6, atol=0)
    assert (g_logp != 0).any() and (g_logp == 0).any()  # both branches among the cases


def test_an_activation_without_a_written_out_backward_falls_back_to_autograd() -> None:
    agent = make_agent("ppo", "torch", _network(True, "tanh", [64, 64]))
    agent.policy.actor[1] = nn.GELU()
    with pytest.raises(ValueError, match="GELU"):
        ActorCriticGrad(agent.policy)
    net = _network(True, "tanh", [64, 64])
    import rl2edge.train.torch_backend.nets as nets

    with pytest.MonkeyPatch.context() as mp:  # a network the builder makes with another activation
        mp.setitem(nets._ACTIVATIONS, "tanh", nn.GELU)
        agent = make_agent("ppo", "torch", net)
    assert agent.autograd and agent.backprop is None
    mb = _minibatch(agent, np.random.default_rng(4))
    before = [p.detach().clone() for p in agent.params]
    agent.train_step(mb, CLIP)
    assert all(not torch.equal(a, b) for a, b in zip(agent.params, before, strict=True))
