"""The written-out SAC and TD3/DDPG gradient steps (`written_out_step`, the default) against their autograd
reference (`autograd_step`) in torch, over the networks and options they cover.

Each case builds two agents from one seed, moves their weights the same way away from the init, and runs
one gradient step in each on one batch with the same random draws: every gradient the step writes (the
critics', the actor's, log-alpha's) must match autograd's, and so must the stats and the weights after
the optimizers' steps. Tolerance: both compute the same products in float32 but sum some in other orders
(the batch sums of the biases' and the log std's gradients, the twin critics' action gradients added at
the end rather than by autograd's accumulation), so a gradient may differ by a few ulps of its largest
summands: rtol 1e-5 and atol 5e-6 of the tensor's largest entry (testkit.written_out's GRAD_RTOL and
GRAD_ATOL_OF_MAX), as the PPO test (tests/test_actor_critic_grad.py). Measured: at most 3.1e-7 of the largest entry over 2336 gradients (the cases below, seeds 0-3).

Before the written-out step every gradient it should write is filled with NaN, so a gradient it skipped
would show rather than keep a stale value. SAC's log std is pushed past both clamp bounds for a share of
the samples (the clamp passes no gradient there). Not covered: a tie between the twin critics' values
(torch.min gives each half; the written-out step does too), which random weights never produce, and
which two critics computing the same function could not tell apart.

The agents, the batch and the step-and-compare helpers: testkit.written_out (tests/test_compile.py holds the
compiled step to them too).
"""

from __future__ import annotations

import pytest
import torch

from testkit.written_out import (
    GRAD_ATOL_OF_MAX,
    assert_grad_close,
    grad_batch,
    offpolicy_agent,
    step_both,
    stepped_params,
)

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
    written, reference = (offpolicy_agent(algo, activation, seed, **overrides) for _ in range(2))
    assert not written.autograd  # the default path is the written-out one
    reference.autograd = True
    if algo == "sac":
        with torch.no_grad():
            raw = written.actor.log_std(written.actor.latent(grad_batch(seed)[0]))
        assert (raw > 2.0).any() and (raw < -20.0).any() and ((raw > -20.0) & (raw < 2.0)).any()
    batch = grad_batch(seed)
    worst = 0.0
    lr = written.cfg.learning_rate(1.0)
    for step in range(4):  # the first creates Adam's state; the later ones run the short optimizer path
        stepped = stepped_params(written)
        for p in stepped.values():
            if p.grad is not None:
                p.grad.fill_(float("nan"))
        step_both(reference, written, batch, step)
        ref_params = dict(reference.nets.named_parameters())
        for name, p in stepped.items():
            worst = max(worst, assert_grad_close(f"{name}.grad, step {step}", p.grad, ref_params[name].grad))
        for (name, w), r in zip(written.nets.named_parameters(), reference.nets.parameters(), strict=True):
            # Adam divides by the gradient's own scale: a rounding difference on an entry near zero can
            # move that weight by up to 2 lr, so the weights are held to 3 lr per step taken.
            torch.testing.assert_close(w, r, rtol=0, atol=3 * lr * (step + 1), msg=name)
            with torch.no_grad():  # and start the next step from the same weights
                w.copy_(r)
    assert worst < GRAD_ATOL_OF_MAX
