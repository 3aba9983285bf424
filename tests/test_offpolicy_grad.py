"""The written-out SAC and TD3/DDPG gradient steps (`written_out_step`, the default) against their autograd
reference (`autograd_step`) in torch, over the networks and options they cover.

Each case builds two agents from one seed, moves their weights the same way away from the init, and runs
one gradient step in each on one batch with the same random draws: every gradient the step writes (the
critics', the actor's, log-alpha's) must match autograd's, and so must the stats and the weights after
the optimizers' steps. Tolerance: both compute the same products in float32 but sum some in other orders
(the batch sums of the biases' and the log std's gradients, the twin critics' action gradients added at
the end rather than by autograd's accumulation), so a gradient may differ by a few ulps of its largest
summands: rtol 1e-5 and atol 5e-6 of the tensor's largest entry, as the PPO test
(tests/test_actor_critic_grad.py). Measured: at most 3.1e-7 of the largest entry over 2336 gradients (the cases below, seeds 0-3).

Before the written-out step every gradient it should write is filled with NaN, so a gradient it skipped
would show rather than keep a stale value. SAC's log std is pushed past both clamp bounds for a share of
the samples (the clamp passes no gradient there). Not covered: a tie between the twin critics' values
(torch.min gives each half; the written-out step does too), which random weights never produce, and
which two critics computing the same function could not tell apart.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl2edge.train.algos import build_config, get

OBS, ACT, B = 3, 2, 64
GRAD_RTOL, GRAD_ATOL_OF_MAX = 1e-5, 5e-6


def _agent(algo: str, activation: str, seed: int, past_clamp: bool = True, **overrides: object):
    cfg = build_config("Pendulum-v1", overrides=dict(overrides), algo=algo)
    spec = {"type": "sac_mlp" if algo == "sac" else "td3_mlp", "obs_dim": OBS, "act_dim": ACT,
            "net_arch": [32, 24], "activation": activation, "log_std_min": -20.0, "log_std_max": 2.0,
            "n_critics": getattr(cfg, "n_critics", 2)}  # fmt: skip
    agent = get(algo).agent_class("torch")(spec, cfg, seed, "cpu")
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # away from the init, the same way in both agents
        for p in agent.nets.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
        if (
            algo == "sac" and past_clamp
        ):  # a log std over [-60, 60]: beyond both clamp bounds for some samples
            agent.actor.log_std.weight.mul_(40.0)
        obs, actions = _batch(seed)[:2]
        for critics in (agent.critic, agent.critic_target):
            _balance(critics, obs, actions)
    return agent


def _balance(critics, obs: torch.Tensor, actions: torch.Tensor) -> None:
    """Shift the second critic's output so that each of the two is the smaller for about half the
    samples: the min's gradient then goes to both (random weights often make one the smaller everywhere)."""
    if len(critics.qs) == 2:
        q1, q2 = critics(obs, actions)
        critics.qs[1][-1].bias.add_((q1 - q2).median())


def _batch(seed: int) -> list[torch.Tensor]:
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


def _stepped_params(agent) -> dict[str, torch.nn.Parameter]:
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


def _step_both(reference, agent, batch: list[torch.Tensor], step: int) -> None:
    """One gradient step in each agent with the same random draws; their stats must agree (NaN where a
    step computes none)."""
    torch.manual_seed(step)
    expected = reference.train_step(*batch)
    torch.manual_seed(step)
    got = agent.train_step(*batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def _assert_close(name: str, got: torch.Tensor, expected: torch.Tensor) -> float:
    scale = float(expected.abs().max())
    torch.testing.assert_close(got, expected, rtol=GRAD_RTOL, atol=GRAD_ATOL_OF_MAX * scale + 1e-12, msg=name)
    return float((got - expected).abs().max()) / max(scale, 1e-30)


CASES = [
    ("sac", "relu", {}),
    ("sac", "tanh", {}),
    ("sac", "relu", {"ent_coef": 0.2}),  # a fixed temperature: no alpha step
    ("sac", "relu", {"target_update_interval": 2}),
    ("td3", "relu", {"policy_delay": 1}),
    ("td3", "tanh", {"policy_delay": 1}),
    ("td3", "relu", {}),  # the preset's policy_delay 2: the actor steps every second critic step
    ("ddpg", "relu", {}),  # one critic, no smoothing
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("algo", "activation", "overrides"), CASES)
def test_written_out_step_matches_autograd(algo: str, activation: str, overrides: dict, seed: int) -> None:
    written, reference = (_agent(algo, activation, seed, **overrides) for _ in range(2))
    assert not written.autograd  # the default path is the written-out one
    reference.autograd = True
    if algo == "sac":
        with torch.no_grad():
            raw = written.actor.log_std(written.actor.latent(_batch(seed)[0]))
        assert (raw > 2.0).any() and (raw < -20.0).any() and ((raw > -20.0) & (raw < 2.0)).any()
    batch = _batch(seed)
    worst = 0.0
    lr = written.cfg.learning_rate(1.0)
    for step in range(4):  # the first creates Adam's state; the later ones run the short optimizer path
        stepped = _stepped_params(written)
        for p in stepped.values():
            if p.grad is not None:
                p.grad.fill_(float("nan"))
        _step_both(reference, written, batch, step)
        ref_params = dict(reference.nets.named_parameters())
        for name, p in stepped.items():
            worst = max(worst, _assert_close(f"{name}.grad, step {step}", p.grad, ref_params[name].grad))
        for (name, w), r in zip(written.nets.named_parameters(), reference.nets.parameters(), strict=True):
            # Adam divides by the gradient's own scale: a rounding difference on an entry near zero can
            # move that weight by up to 2 lr, so the weights are held to 3 lr per step taken.
            torch.testing.assert_close(w, r, rtol=0, atol=3 * lr * (step + 1), msg=name)
            with torch.no_grad():  # and start the next step from the same weights
                w.copy_(r)
    assert worst < GRAD_ATOL_OF_MAX
