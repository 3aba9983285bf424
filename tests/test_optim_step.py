"""The optimizer short path (train.torch_backend.optim_step) against torch.optim's own step: the same bits in
the parameters and in the optimizer's state, exact (torch.equal: the same kernels on the same inputs, so
there is no tolerance to state), its fallbacks, and that the agents take it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(64, 4, generator=g), torch.randn(64, 2, generator=g)) for _ in range(n)]


def _train(net: nn.Module, opt: torch.optim.Optimizer, step, batches, lr_at: dict[int, float]) -> None:
    for i, (x, y) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = lr_at.get(i, group["lr"])
        clear_grads(opt) if step is fused_adam_step else opt.zero_grad(set_to_none=True)
        ((net(x) - y) ** 2).mean().backward()
        step(opt)


def _assert_same(a: nn.Module, b: nn.Module, oa: torch.optim.Optimizer, ob: torch.optim.Optimizer) -> None:
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert sa.keys() == sb.keys() and sa
    for k in sa:
        assert sa[k].keys() == sb[k].keys()
        for name in sa[k]:
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)


@pytest.mark.parametrize(
    "options",
    [
        {"lr": 1e-3, "eps": 1e-5},  # PPO's
        {"lr": 3e-4, "weight_decay": 0.01, "betas": (0.8, 0.95)},
    ],
)
def test_fused_adam_step_gives_the_bits_of_adam_step(options: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _net(), _net()
    oa = torch.optim.Adam(a.parameters(), fused=True, **options)
    ob = torch.optim.Adam(b.parameters(), fused=True, **options)
    batches = _batches(12)
    lr_at = {5: 5e-4, 9: 1e-4}  # a schedule moves the learning rate through param_groups
    _train(a, oa, torch.optim.Adam.step, batches, lr_at)
    plain, fallbacks = torch.optim.Adam.step, []
    monkeypatch.setattr(torch.optim.Adam, "step", lambda o, *x: fallbacks.append(o) or plain(o, *x))
    _train(b, ob, fused_adam_step, batches, lr_at)
    monkeypatch.undo()
    assert len(fallbacks) == 1  # the first step, which makes the state; the other 11 took the short path
    _assert_same(a, b, oa, ob)
    # and a plain step after the short ones continues from the same state
    for net, opt in ((a, oa), (b, ob)):
        opt.zero_grad()
        net(batches[0][0]).sum().backward()
        opt.step()
    _assert_same(a, b, oa, ob)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: torch.optim.Adam(p, lr=1e-3, fused=True, amsgrad=True),
        lambda p: torch.optim.Adam(p, lr=1e-3),  # not fused: foreach
        lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True),
        lambda p: torch.optim.RMSprop(p, lr=1e-3, alpha=0.99, eps=1e-5),  # A2C's
    ],
    ids=["amsgrad", "foreach", "adamw", "rmsprop"],
)
def test_what_the_short_path_does_not_cover_falls_back_to_step(make) -> None:
    a, b = _net(), _net()
    oa, ob = make(a.parameters()), make(b.parameters())
    batches = _batches(6)
    _train(a, oa, lambda opt: opt.step(), batches, {})
    _train(b, ob, fused_adam_step, batches, {})
    _assert_same(a, b, oa, ob)


def test_a_parameter_without_a_gradient_falls_back_to_step() -> None:
    a, b = _net(), _net()
    oa = torch.optim.Adam(a.parameters(), lr=1e-3, fused=True)
    ob = torch.optim.Adam(b.parameters(), lr=1e-3, fused=True)
    batches = _batches(4)
    _train(a, oa, torch.optim.Adam.step, batches, {})
    _train(b, ob, fused_adam_step, batches, {})
    # the last layer out of the loss: its gradient stays None, and Adam leaves it (and its state) alone
    for net, opt, step in ((a, oa, torch.optim.Adam.step), (b, ob, fused_adam_step)):
        opt.zero_grad(set_to_none=True)
        net[:4](batches[0][0]).sum().backward()
        step(opt)
    _assert_same(a, b, oa, ob)


def test_step_hooks_and_incomplete_state_fall_back_to_step() -> None:
    """A step hook runs on every step (the short path would skip it), and a state entry that exists but is
    empty (reading opt.state[p] adds one) is made by step(), not read as a KeyError."""
    a, b = _net(), _net()
    oa = torch.optim.Adam(a.parameters(), lr=1e-3, fused=True)
    ob = torch.optim.Adam(b.parameters(), lr=1e-3, fused=True)
    seen = []
    ob.register_step_post_hook(lambda opt, args, kwargs: seen.append(1))
    batches = _batches(3)
    _train(a, oa, torch.optim.Adam.step, batches, {})
    _train(b, ob, fused_adam_step, batches, {})
    assert len(seen) == 3
    _assert_same(a, b, oa, ob)
    c = _net()
    oc = torch.optim.Adam(c.parameters(), lr=1e-3, fused=True)
    for p in c.parameters():
        assert oc.state[p] == {}  # the defaultdict's empty entries
    _train(c, oc, fused_adam_step, batches[:1], {})
    assert all("step" in oc.state[p] for p in c.parameters())


def test_clear_grads_sets_every_gradient_to_none() -> None:
    net = _net()
    opt = torch.optim.Adam(net.parameters(), fused=True)
    net(torch.ones(1, 4)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    clear_grads(opt)
    assert all(p.grad is None for p in net.parameters())


def test_the_agents_take_the_short_path_after_their_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts torch.optim.Adam.step calls while PPO and SAC train: one per optimizer (the step that makes
    its state), however many steps follow. A regression to opt.step() shows here, not only in a benchmark."""
    from rl2edge.train.algos import build_config, get
    from rl2edge.train.core.replay import ReplayBatch
    from rl2edge.train.core.rollout import Minibatch

    calls = []
    plain = torch.optim.Adam.step
    monkeypatch.setattr(
        torch.optim.Adam, "step", lambda self, *a, **k: calls.append(self) or plain(self, *a, **k)
    )
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    spec = NetworkSpec(
        type="actor_critic_mlp", obs_dim=4, act_dim=2, discrete=True, net_arch=(16, 16), activation="tanh"
    )
    ppo = get("ppo").agent_class("torch")(spec, build_config("CartPole-v1", algo="ppo"), 0, "cpu")
    mbs = [Minibatch(f32(8, 4), rng.integers(0, 2, 8), f32(8), f32(8), f32(8), f32(8)) for _ in range(5)]
    ppo.train_minibatches(mbs, 0.2)
    assert len(calls) == 1

    calls.clear()
    spec = NetworkSpec(type="sac_mlp", obs_dim=3, act_dim=1, net_arch=(16, 16), activation="relu",
                       log_std_min=-20.0, log_std_max=2.0)  # fmt: skip
    sac = get("sac").agent_class("torch")(spec, build_config("Pendulum-v1", algo="sac"), 0, "cpu")
    batch = ReplayBatch(f32(4, 8, 3), f32(4, 8, 1), f32(4, 8), f32(4, 8, 3), np.zeros((4, 8), np.float32))
    sac.train(batch)
    assert len(calls) == 3 and len({id(o) for o in calls}) == 3  # actor, critic, temperature: once each
    before = copy.deepcopy(sac.get_state())
    sac.train(batch)
    assert len(calls) == 3
    assert any(not torch.equal(before[k], v) for k, v in sac.get_state().items())  # and it still trains
