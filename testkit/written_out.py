"""The written-out off-policy gradient steps (SAC, TD3/DDPG, torch) compared with a reference step: agents
moved away from their init, one replay batch, both steps run on the same random draws, gradients held to
a tolerance of their largest entry. Shared by tests/test_offpolicy_grad.py (against autograd) and
tests/test_compile.py (against the compiled step); the tolerance is argued in the first."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from testkit.agents import make_agent, network

OBS, ACT, B = 3, 2, 64
GRAD_RTOL, GRAD_ATOL_OF_MAX = 1e-5, 5e-6


def offpolicy_agent(
    algo: str, activation: str, seed: int, past_clamp: bool = True, **overrides: object
) -> Any:
    """A torch SAC, TD3 or DDPG agent on Pendulum-v1's preset and `overrides`, 32-24 wide, its weights
    moved away from the init by a draw of `seed` (two agents of one seed move alike); SAC's log std
    spread past both clamp bounds for some samples unless not `past_clamp`; the twin critics balanced
    (`_balance`) on `grad_batch(seed)`."""
    agent = make_agent(
        algo,
        "torch",
        lambda cfg: network(algo, OBS, ACT, cfg, net_arch=[32, 24], activation=activation),
        "Pendulum-v1",
        seed,
        **overrides,
    )
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # away from the init, the same way in both agents
        for p in agent.nets.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
        if (
            algo == "sac" and past_clamp
        ):  # a log std over [-60, 60]: beyond both clamp bounds for some samples
            agent.actor.log_std.weight.mul_(40.0)
        obs, actions = grad_batch(seed)[:2]
        for critics in (agent.critic, agent.critic_target):
            _balance(critics, obs, actions)
    return agent


def _balance(critics: Any, obs: torch.Tensor, actions: torch.Tensor) -> None:
    """Shift the second critic's output so that each of the two is the smaller for about half the
    samples: the min's gradient then goes to both (random weights often make one the smaller everywhere)."""
    if len(critics.qs) == 2:
        q1, q2 = critics(obs, actions)
        critics.qs[1][-1].bias.add_((q1 - q2).median())


def grad_batch(seed: int) -> list[torch.Tensor]:
    """One replay batch of B transitions (obs, actions in [-1, 1], rewards, next obs, dones: a fifth
    terminations) drawn from `seed`."""
    rng = np.random.default_rng(seed)
    f = lambda *s: torch.as_tensor(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    dones = torch.as_tensor((rng.random(B) < 0.2).astype(np.float32))
    return [
        f(B, OBS),
        torch.as_tensor(rng.uniform(-1, 1, (B, ACT)).astype(np.float32)),
        f(B),
        f(B, OBS),
        dones,
    ]


def stepped_params(agent: Any) -> dict[str, torch.nn.Parameter]:
    """The parameters whose gradient the agent's next step writes: TD3's actor only on the critic steps
    that are a multiple of policy_delay, SAC's log-alpha only when the temperature is learned."""
    named = dict(agent.nets.named_parameters())
    delay = getattr(agent.cfg, "policy_delay", 1)
    actor_steps = (agent.n_updates + 1) % delay == 0 if hasattr(agent, "actor_target") else True
    return {
        k: p
        for k, p in named.items()
        if "target" not in k
        and (k != "log_alpha" or agent.alpha_opt)
        and (actor_steps or not k.startswith("actor."))
    }


def step_both(reference: Any, agent: Any, batch: list[torch.Tensor], step: int) -> None:
    """One gradient step in each agent with the same random draws; their stats must agree (NaN where a
    step computes none)."""
    torch.manual_seed(step)
    expected = reference.train_step(*batch)
    torch.manual_seed(step)
    got = agent.train_step(*batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def assert_grad_close(name: str, got: torch.Tensor, expected: torch.Tensor) -> float:
    """`got` within GRAD_RTOL and GRAD_ATOL_OF_MAX of `expected`'s largest entry; the largest difference
    as a share of that entry."""
    scale = float(expected.abs().max())
    torch.testing.assert_close(got, expected, rtol=GRAD_RTOL, atol=GRAD_ATOL_OF_MAX * scale + 1e-12, msg=name)
    return float((got - expected).abs().max()) / max(scale, 1e-30)
