"""PyTorch PPO: reproducibility, the rollout records what the update needs, the clipped surrogate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rl2edge.train.core.checkpoint import load_checkpoint
from rl2edge.train.core.config import PPOConfig
from rl2edge.train.torch_backend import ppo as ppo_module
from rl2edge.train.torch_backend.actor_critic_grad import ActorCriticGrad
from rl2edge.train.torch_backend.nets import ActorCritic
from rl2edge.train.torch_backend.ppo import clipped_surrogate
from testkit.runs import tiny_train


def test_same_seed_gives_identical_checkpoint(tmp_path: Path) -> None:
    a = tiny_train("CartPole-v1", tmp_path / "a", steps=1024, seed=7)
    b = tiny_train("CartPole-v1", tmp_path / "b", steps=1024, seed=7)
    c = tiny_train("CartPole-v1", tmp_path / "c", steps=1024, seed=8)
    assert (a / "policy.safetensors").read_bytes() == (b / "policy.safetensors").read_bytes()
    assert (a / "checkpoint.json").read_bytes() == (b / "checkpoint.json").read_bytes()
    assert (a / "policy.safetensors").read_bytes() != (c / "policy.safetensors").read_bytes()


def test_checkpoint_holds_the_contract(cartpole_run: Path) -> None:
    ckpt = load_checkpoint(cartpole_run)
    meta = json.loads((cartpole_run / "checkpoint.json").read_text())
    assert meta["algo"] == "ppo" and meta["framework"] == "torch" and meta["env_id"] == "CartPole-v1"
    assert meta["action_space"] == {"type": "discrete", "n": 2, "start": 0}
    assert meta["normalization"]["count"] > 4096  # statistics were updated and saved
    assert len(meta["normalization"]["mean"]) == 4 and meta["hyperparameters"]["n_envs"] == 8
    assert {"torch", "numpy", "gymnasium", "python"} <= set(meta["versions"])
    assert ckpt.weights_path.suffix == ".safetensors"
    # the writer and the reader are one definition: the typed Checkpoint gives back the file it was read from
    assert ckpt.to_json() == meta and ckpt.versions == meta["versions"]
    assert (cartpole_run / "progress.csv").read_text().startswith("step,")
    assert list((cartpole_run / "tb").glob("events.out.tfevents.*"))


def test_update_uses_recorded_logprobs_and_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The update never re-evaluates the rollout to recover old log-probs: the first minibatch of each
    update sees ratio == 1 (within 1e-5: the rollout's log-probs come from the numpy policy, measured
    2.4e-7 from torch's here; tests/test_numpy_policy.py's tolerance), and the update's forward pass runs
    once per minibatch, nothing more."""
    calls, first_ratios = {"forward": 0}, []
    real_forward, real_grads = ActorCriticGrad.forward, ppo_module.ppo_grads

    def counting_forward(self, obs, actions):
        calls["forward"] += 1
        return real_forward(self, obs, actions)

    def spying_grads(fwd, old_logp, *rest):
        if calls["forward"] % per_update == 1:
            first_ratios.append(float((fwd.terms.logp - old_logp).abs().max()))
        return real_grads(fwd, old_logp, *rest)

    n_envs, n_steps, batch, epochs, updates = 2, 64, 32, 3, 2
    per_update = epochs * (n_envs * n_steps // batch)
    monkeypatch.setattr(ActorCriticGrad, "forward", counting_forward)
    monkeypatch.setattr(ActorCritic, "evaluate_actions", lambda *a: pytest.fail("a second forward pass"))
    monkeypatch.setattr(ppo_module, "ppo_grads", spying_grads)
    tiny_train(
        "CartPole-v1",
        tmp_path / "r",
        steps=n_envs * n_steps * updates,
        n_envs=n_envs,
        n_steps=n_steps,
        batch_size=batch,
        n_epochs=epochs,
    )
    assert calls["forward"] == per_update * updates
    assert first_ratios and max(first_ratios) < 1e-5


def test_clipped_surrogate_is_the_pessimistic_min_not_a_clipped_ratio() -> None:
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.5], requires_grad=True)
    clipped_surrogate(adv, ratio, 0.2).backward()
    # Improvements beyond the trust region get no gradient (first two); where the new policy is worse
    # than the old one the unclipped term is the min and keeps its gradient (last two). A
    # clip_by_value(ratio) * adv objective would zero all four.
    np.testing.assert_allclose(ratio.grad.numpy(), [0.0, 0.0, -0.25, 0.25])


def test_value_clipping_limits_the_value_move() -> None:
    cfg = PPOConfig(clip_range_vf=0.1, vf_coef=1.0)
    z = torch.zeros(1)
    values = torch.tensor([5.0], requires_grad=True)
    _, _, v_loss, *_ = ppo_module.ppo_loss(z, z, values, z, z, z, torch.tensor([5.0]), 0.2, cfg)
    assert v_loss.item() == pytest.approx((5.0 - 0.1) ** 2)


def test_box_actions_on_a_user_env(tmp_path: Path) -> None:
    run = tiny_train(
        "tests.fixtures.user_env:TargetEnv", tmp_path / "u", steps=512, n_envs=2, n_steps=128, batch_size=64
    )
    ckpt = load_checkpoint(run)
    assert not ckpt.action.discrete and ckpt.network.discrete is False
    summary = json.loads((run / "summary.json").read_text())
    assert np.isfinite(summary["final_eval"]["mean_return"])


def test_lean_clip_and_log_probs_are_torchs_own() -> None:
    # The update's hand-written pieces against torch's: clip_grad_norm does clip_grad_norm_'s ops (so the
    # same bits); evaluate_actions' written-out formulas match torch.distributions within float32 rounding
    # of a few ops (1e-6 on log-probs of order 1).
    import torch
    from torch.distributions import Categorical, Normal

    from rl2edge.train.torch_backend.nets import ActorCritic, clip_grad_norm

    torch.manual_seed(0)
    for discrete in (True, False):
        net = ActorCritic(4, 3 if discrete else 2, discrete, [64, 64])
        if not discrete:
            net.log_std.data[:] = torch.tensor([-0.5, 0.3])
        obs = torch.randn(256, 4)
        actions = torch.randint(0, 3, (256,)) if discrete else torch.randn(256, 2)
        logp, ent, values = net.evaluate_actions(obs, actions)
        out = net.actor(obs)
        if discrete:
            ref = Categorical(logits=out)
            ref_logp, ref_ent = ref.log_prob(actions), ref.entropy()
        else:
            ref = Normal(out, net.log_std.exp().expand_as(out))
            ref_logp, ref_ent = ref.log_prob(actions).sum(-1), ref.entropy().sum(-1)
        torch.testing.assert_close(logp, ref_logp, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(ent, ref_ent, atol=1e-6, rtol=1e-6)

        ((logp.mean() + values.mean()) * 50).backward()  # large gradients: the clip acts
        params = list(net.parameters())
        grads = [p.grad.clone() for p in params]
        clip_grad_norm(params, 0.5)
        mine = [p.grad.clone() for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        assert all(torch.equal(a, p.grad) for a, p in zip(mine, params, strict=True))
        assert torch.linalg.vector_norm(torch.stack([g.norm() for g in mine])) < 0.5 + 1e-5
