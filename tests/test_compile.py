"""`train --compile`: torch PPO/A2C run their forward pass and loss as one torch.compile graph. It must
trace once however the schedules move (the retracing trap of the brief, in torch's form), and give the
eager update's gradients up to float reordering (inductor fuses the elementwise ops, so the last bits
differ: never compared for equality). TF's off-policy agents run their training phase as one XLA
computation (parity with the graph: tests/test_offpolicy_mechanics.py); here, the flag reaching one
through `train`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rl2edge.train.core.config import A2CConfig, PPOConfig
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.torch_backend.a2c import TorchA2C
from rl2edge.train.torch_backend.ppo import TorchPPO
from tests.helpers import assert_clean_failure, rl2edge

NETWORK = {
    "type": "actor_critic_mlp",
    "obs_dim": 4,
    "act_dim": 2,
    "discrete": True,
    "net_arch": [64, 64],
    "activation": "tanh",
}


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


def test_compile_is_refused_where_there_is_no_compiled_update(tmp_path: Path) -> None:
    for args, fragment in (
        (["--algo", "ppo", "--framework", "tf", "--env", "CartPole-v1"], "XLA"),
        (["--algo", "sac", "--env", "Pendulum-v1"], "SAC's torch update has no compiled form"),
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
