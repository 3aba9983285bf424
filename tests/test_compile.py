"""`train --compile`: torch PPO/A2C run their forward pass and loss as one torch.compile graph, torch SAC
and TD3/DDPG their written-out gradient step with its Adam steps. Each must trace once however the
schedules move (the retracing trap of the brief, in torch's form), and give the eager update's gradients
up to float reordering (inductor fuses the elementwise ops, so the last bits differ: never compared for
equality). TF's off-policy agents run their training phase as one XLA computation (parity with the
graph: tests/test_offpolicy_mechanics.py); here, the flag reaching one through `train`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rl2edge.train.core.config import A2CConfig, PPOConfig
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.torch_backend.a2c import TorchA2C
from rl2edge.train.torch_backend.graph_adam import GraphAdam
from rl2edge.train.torch_backend.ppo import TorchPPO
from testkit.cli import assert_clean_failure, rl2edge
from testkit.written_out import assert_grad_close, grad_batch, offpolicy_agent, step_both, stepped_params

NETWORK = NetworkSpec(
    type="actor_critic_mlp", obs_dim=4, act_dim=2, discrete=True, net_arch=(64, 64), activation="tanh"
)


def _minibatch(seed: int, n: int = 64) -> Minibatch:
    rng = np.random.default_rng(seed)
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    return Minibatch(f(n, 4), rng.integers(0, 2, n), f(n) - 0.7, f(n), f(n), f(n))


def _grads(agent: TorchPPO, mb: Minibatch, clip: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    agent.optimizer.zero_grad(set_to_none=True)
    loss, stats = agent.loss(mb, clip)
    loss.backward()
    return stats, [p.grad.clone() for p in agent.params]


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _reset_dynamo() -> None:
    """No compiled code and no counts from an earlier test."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


@pytest.mark.parametrize(
    ("cls", "cfg"),
    [
        (TorchPPO, PPOConfig(clip_range_vf=0.5)),
        pytest.param(TorchA2C, A2CConfig(), marks=pytest.mark.slow),  # another 20 s of compiling
    ],
    ids=["ppo", "a2c"],
)
def test_compiled_update_traces_once_and_matches_eager(cls: type, cfg: object) -> None:
    """Ten updates with the clip range and the learning rate moving as their linear schedules do: one
    graph. Gradients and stats against the eager agent's at the same weights: rtol 1e-4 and atol 1e-6,
    room for float32 rounding of reordered sums over 64 rows and 64-wide layers (measured on PPO's
    gradients: at most 1.2e-7 apart)."""
    _reset_dynamo()
    eager, compiled = cls(NETWORK, cfg, 0, "cpu"), cls(NETWORK, cfg, 0, "cpu")
    compiled.compile_update()
    assert _dynamo_graphs() == 0
    for step in range(10):
        mb, clip = _minibatch(step), 0.2 * (1 - step / 10)
        compiled.set_state(eager.get_state())  # the same weights each step: the comparison stays local
        want_stats, want = _grads(eager, mb, clip)
        got_stats, got = _grads(compiled, mb, clip)
        torch.testing.assert_close(got_stats, want_stats, rtol=1e-4, atol=1e-6)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
        for agent in (eager, compiled):
            agent.set_learning_rate(3e-4 * (1 - step / 10))
            agent.optimizer.step()
    assert _dynamo_graphs() == 1, "the compiled loss was traced more than once"


def test_a_python_float_clip_would_retrace() -> None:
    """The control of the test above: the same compiled loss fed the clip range as a Python float makes a
    graph per value (torch.compile specializes on it), which is why TorchPPO passes a 0-d tensor."""
    _reset_dynamo()
    agent = TorchPPO(NETWORK, PPOConfig(), 0, "cpu")
    agent.compile_update()
    agent.compiled = False  # what the agent would do without the tensor: the float as it comes
    mb = _minibatch(0)
    for clip in (0.2, 0.19, 0.18):
        agent.loss(mb, clip)
    assert _dynamo_graphs() > 1


def test_graph_adam_matches_torch_fused_adam() -> None:
    """The compiled graph's Adam against torch's fused kernel on the same gradients, six steps of
    gradients of 1e-8 (the scale of eps, where its place in the formula shows), 1 and 10, and a
    learning-rate change: parameters within 1e-6 (16 ulps of a
    weight near 1, a thousandth of one step at lr 1e-3: the two order a few float32 operations
    differently; measured 2.4e-7), one graph, and the step counters the optimizer's own."""
    _reset_dynamo()
    gen = torch.Generator().manual_seed(0)
    fused = [
        torch.nn.Parameter(torch.randn(64, 32, generator=gen)),
        torch.nn.Parameter(torch.randn(32, generator=gen)),
    ]
    ours = [torch.nn.Parameter(p.detach().clone()) for p in fused]
    ref_opt = torch.optim.Adam(fused, lr=1e-3, fused=True)
    opt = torch.optim.Adam(ours, lr=1e-3, fused=True)
    graph_adam = GraphAdam(opt)
    step = torch.compile(graph_adam.step, fullgraph=True, dynamic=False)
    for i in range(6):
        for p, q in zip(fused, ours, strict=True):
            p.grad = torch.randn(p.shape, generator=gen) * (1e-8, 1.0, 10.0)[i % 3]  # 1e-8: where eps tells
            q.grad = p.grad.clone()
        ref_opt.step()
        step()
        for p, q in zip(fused, ours, strict=True):
            torch.testing.assert_close(q, p, rtol=0, atol=1e-6)
        if i == 2:
            for o in (ref_opt, opt):
                o.param_groups[0]["lr"] = 5e-4
            graph_adam.sync_lr()
    assert [float(opt.state[q]["step"]) for q in ours] == [6.0, 6.0]
    assert _dynamo_graphs() == 1


def test_graph_adam_refuses_what_it_does_not_compute() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="weight_decay"):
        GraphAdam(torch.optim.Adam([p], weight_decay=0.01))
    with pytest.raises(ValueError, match="amsgrad"):
        GraphAdam(torch.optim.Adam([p], amsgrad=True))
    with pytest.raises(ValueError, match=r"torch\.optim\.Adam"):
        GraphAdam(torch.optim.AdamW([p]))


# Adam's eps in the comparison of compiled and eager steps: at the default 1e-8, an entry whose gradient is
# at rounding level (the two engines' gradients differ there by 1e-7 of the largest) is moved by up to lr
# in either direction, and the actor's gradient, taken through the critics just stepped, then differs by
# 2e-5 of its largest (measured); at 1e-3 the step is smooth in the gradient.
ADAM_EPS = 1e-3
# SAC's actor gradient passes through SB3's tanh correction, d/da of -log(1 - a^2 + 1e-6): 2a / (1 - a^2 +
# 1e-6), whose own slope near |a| = 1 turns the ulp by which inductor's tanh and exp differ from ATen's into
# 1e-5 of the gradient's largest entry (measured: 2.2e-5 over four steps); held to five times that.
SAC_ACTOR_ATOL_OF_MAX = 1e-4


@pytest.mark.parametrize(
    ("algo", "overrides", "graphs"),
    [
        ("sac", {}, 1),  # learned temperature: three Adam steps in one graph
        ("td3", {}, 2),  # policy delay 2: the critics' graph every step, the actor's every second
        pytest.param("ddpg", {}, 2, marks=pytest.mark.slow),
    ],
)
def test_compiled_offpolicy_step_matches_eager(algo: str, overrides: dict, graphs: int) -> None:
    """Four gradient steps of the compiled agent against the eager written-out one from the same weights
    and draws (inductor's own random numbers replaced by eager's: fallback_random), the learning rate
    moving between steps (Adam's eps raised in both: ADAM_EPS). SAC's log std stays inside its clamp here: pushed past 2, tanh saturates, and
    inductor's tanh, an ulp from ATen's at 1 - 6e-8, moves SB3's log(1 - a^2 + 1e-6) by up to 0.1 per
    sample (seen: critic gradients 1e-3 apart), a near tie of the inputs, not of the two steps. Compared: the stats and every gradient within the tolerance of
    tests/test_offpolicy_grad.py (testkit.written_out); the parameters where torch's fused Adam takes them from those
    gradients (1e-6: the Adam test above), which shows the graph's updates reach the agent's own
    parameters; and `graphs` traces in all."""
    _reset_dynamo()
    compiled, eager = (offpolicy_agent(algo, "relu", 0, past_clamp=False, **overrides) for _ in range(2))
    for opt in compiled.optimizers + eager.optimizers:
        opt.param_groups[0]["eps"] = ADAM_EPS
    compiled.compile_update()
    assert compiled.compiled and not eager.compiled
    batch = grad_batch(0)
    # a shadow of the compiled agent's optimizers: torch's fused Adam fed the compiled step's gradients
    params = list(compiled.nets.parameters())
    shadow = [torch.nn.Parameter(p.detach().clone()) for p in params]
    shadow_of = {id(p): s for p, s in zip(params, shadow, strict=True)}
    shadow_opts = [
        torch.optim.Adam([shadow_of[id(p)] for p in opt.param_groups[0]["params"]], eps=ADAM_EPS, fused=True)
        for opt in compiled.optimizers
    ]
    with torch._inductor.config.patch(fallback_random=True):
        for step in range(4):
            lr = 1e-3 * (1 - step / 8)
            for agent in (compiled, eager):
                agent.set_learning_rate(lr)
            for opt in shadow_opts:
                opt.param_groups[0]["lr"] = lr
            stepped = stepped_params(compiled)
            before = [p.detach().clone() for p in params]
            step_both(eager, compiled, batch, step)
            eager_params = dict(eager.nets.named_parameters())
            for name, p in stepped.items():
                if algo == "sac" and name.startswith("actor."):
                    scale = float(eager_params[name].grad.abs().max())
                    torch.testing.assert_close(p.grad, eager_params[name].grad, rtol=0,
                                               atol=SAC_ACTOR_ATOL_OF_MAX * scale, msg=f"{name}.grad, step {step}")  # fmt: skip
                else:
                    assert_grad_close(f"{name}.grad, step {step}", p.grad, eager_params[name].grad)
            stepped_ids = {id(p) for p in stepped.values()}
            for p, s, b in zip(params, shadow, before, strict=True):
                with torch.no_grad():
                    s.copy_(b)
                s.grad = p.grad.clone() if id(p) in stepped_ids else None
            for opt in shadow_opts:
                if any(q.grad is not None for q in opt.param_groups[0]["params"]):
                    opt.step()
            for (name, p), s, e in zip(
                compiled.nets.named_parameters(), shadow, eager.nets.parameters(), strict=True
            ):
                if "target" not in name:
                    torch.testing.assert_close(p, s, rtol=0, atol=1e-6, msg=name)
                else:  # the polyak updates (inside TD3's actor graph, eager after SAC's): from the same weights
                    torch.testing.assert_close(p, e, rtol=0, atol=1e-6, msg=f"{name}, step {step}")
            with torch.no_grad():  # the next step from the eager agent's weights again
                for p, e in zip(params, eager.nets.parameters(), strict=True):
                    p.copy_(e)
    assert _dynamo_graphs() == graphs


def test_compile_is_refused_where_there_is_no_compiled_update(tmp_path: Path) -> None:
    for args, fragment in (
        (["--algo", "ppo", "--framework", "tf", "--env", "CartPole-v1"], "XLA"),
        (["--algo", "dqn", "--env", "CartPole-v1"], "DQN's torch update has no compiled form"),
    ):
        assert_clean_failure(rl2edge("train", *args, "--compile", "--out", tmp_path / "run"), fragment)
        assert not (tmp_path / "run").exists()


def test_compile_reaches_a_tf_offpolicy_agent_through_train(tmp_path: Path) -> None:
    """Rainbow (TF): `compile_update=True` makes its gradient step an XLA computation, traced once."""
    from rl2edge.train.algos import build_config, train

    cfg = build_config(
        "CartPole-v1", overrides={"n_timesteps": 400, "learning_starts": 200, "eval_freq": 0}, algo="rainbow"
    )
    out: list = []
    train("tf", "CartPole-v1", cfg, 0, tmp_path / "run", device="cpu", progress=False, agent_out=out,
          compile_update=True)  # fmt: skip
    agent = out[0]
    assert agent._train_step._jit_compile is True
    assert agent.trace_counts()["train_step"] == 1


def test_compile_reaches_a_torch_offpolicy_agent_through_train(tmp_path: Path) -> None:
    """SAC (torch): `compile_update=True` runs the gradient steps of a short run as one graph, traced once
    over all of them, and the run finishes with its checkpoint."""
    from rl2edge.train.algos import build_config, train

    _reset_dynamo()
    cfg = build_config(
        "Pendulum-v1",
        overrides={"n_timesteps": 300, "learning_starts": 200, "eval_freq": 0, "net_arch": [32, 32]},
        algo="sac",
    )
    out: list = []
    train("torch", "Pendulum-v1", cfg, 0, tmp_path / "run", device="cpu", progress=False, agent_out=out,
          compile_update=True)  # fmt: skip
    agent = out[0]
    assert agent.compiled and agent.n_updates == 100
    assert _dynamo_graphs() == 1
    assert (tmp_path / "run" / "checkpoint.json").exists()
