"""Subnormal floats flushed while torch agents take their gradient steps (train.torch_backend.denormals):
the switch is scoped to the training phase and gives the caller's setting back, every torch trainer's
phase runs under it, and a flushed phase steps the weights as an unflushed one does."""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch

from rl2edge.train.algos import build_config, get, train
from rl2edge.train.torch_backend import denormals
from rl2edge.train.torch_backend.denormals import flush_denormals, flushing

pytestmark = pytest.mark.skipif(
    not torch.set_flush_denormal(False), reason="this CPU cannot flush subnormals (torch.set_flush_denormal)"
)


def test_flushing_is_scoped_and_the_callers_setting_comes_back() -> None:
    tiny = denormals._SUBNORMAL
    assert not flushing() and float(tiny * 1.0) > 0.0  # a subnormal survives by default
    with flush_denormals():
        assert flushing() and float(tiny * 1.0) == 0.0
    assert not flushing()
    with pytest.raises(RuntimeError), flush_denormals():
        raise RuntimeError("inside")
    assert not flushing()
    torch.set_flush_denormal(True)  # a caller that flushes keeps flushing
    try:
        with flush_denormals():
            assert flushing()
        assert flushing()
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("algo", ["sac", "td3", "dqn", "rainbow", "ppo", "a2c"])
def test_every_torch_training_phase_flushes(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    cls = get(algo).agent_class("torch")
    real = cls.train_step

    def spy(self, *args, **kwargs):
        seen.append(flushing())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "train_step", spy)
    env = "Pendulum-v1" if algo in ("sac", "td3") else "CartPole-v1"
    on_policy = algo in ("ppo", "a2c")
    short = {"n_timesteps": 512} if on_policy else {"n_timesteps": 300, "learning_starts": 100}
    cfg = build_config(env, overrides={**short, "net_arch": [8], "eval_freq": 0}, algo=algo)
    with tempfile.TemporaryDirectory() as d:
        train("torch", env, cfg, 0, Path(d) / "run", device="cpu", progress=False)
    assert seen and all(seen)
    assert not flushing()  # and the driver's thread is back as it was


def _subnormal_moments(agent) -> int:
    tiny = torch.finfo(torch.float32).tiny
    moments = [s["exp_avg"] for opt in agent.optimizers for s in opt.state.values()]
    return sum(int(((m != 0) & (m.abs() < tiny)).sum()) for m in moments)


def test_a_flushed_training_phase_steps_the_weights_as_an_unflushed_one() -> None:
    """SAC on Pendulum, 64-wide ReLU nets, trained 1000 steps without the flush: Adam's first moments of
    dead units are then passing through the subnormal range. From that one state, one training phase with
    the flush and one without: the flushed one leaves no subnormal moment, and both leave the same
    weights to 1e-7 (a flushed moment is below 1.2e-38: its update, lr m / (sqrt(v) + eps), is under
    1e-30, which a float32 weight of order 0.01-1 cannot register). One phase from one state, so no
    chaotic divergence of two whole runs is compared; measured here: bit for bit."""
    import copy

    import rl2edge.train.torch_backend.matmul_precision as phase  # training_phase: its flush
    from rl2edge.train.core.replay import ReplayBatch

    cfg = build_config("Pendulum-v1", overrides={"n_timesteps": 1000, "net_arch": [64, 64], "eval_freq": 0},
                       algo="sac")  # fmt: skip
    out: list = []
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as d:
        mp.setattr(phase, "flush_denormals", nullcontext)
        train("torch", "Pendulum-v1", cfg, 0, Path(d) / "run", device="cpu", progress=False, agent_out=out)
    trained = out[0]
    assert _subnormal_moments(trained) > 0

    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    batch = ReplayBatch(f(1, 256, 3), rng.uniform(-1, 1, (1, 256, 1)).astype(np.float32), f(1, 256),
                        f(1, 256, 3), np.zeros((1, 256), np.float32))  # fmt: skip
    flushed, plain = copy.deepcopy(trained), copy.deepcopy(trained)
    torch.manual_seed(1)
    flushed.train(batch)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(phase, "flush_denormals", nullcontext)
        torch.manual_seed(1)
        plain.train(batch)
    assert _subnormal_moments(flushed) == 0 and _subnormal_moments(plain) > 0
    for (name, a), b in zip(flushed.nets.state_dict().items(), plain.nets.state_dict().values(), strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-7, err_msg=name)


_WORKERS = r"""
import sys, torch
from rl2edge.train.torch_backend.denormals import _SUBNORMAL, flushing, start_workers_flushing
if sys.argv[1] == "flushing":
    start_workers_flushing(2)
else:
    torch.set_num_threads(2)
    torch.ones(1 << 17).mul_(1.0)  # the workers start here, without the flush
spread = _SUBNORMAL.expand(1 << 17).contiguous()  # split over both threads when multiplied
zeros = int((spread * 1.0 == 0).sum())
print(flushing(), zeros, spread.numel())
"""


def _gnu_openmp() -> bool:
    """torch's intra-op pool is GNU OpenMP (libgomp), whose workers keep the MXCSR they started with."""
    with open("/proc/self/maps") as maps:
        return any("libgomp" in line for line in maps)


@pytest.mark.skipif(not Path("/proc/self/maps").exists() or not _gnu_openmp(), reason="needs GNU OpenMP")
@pytest.mark.parametrize("mode", ["flushing", "plain"])
def test_intra_op_workers_started_by_the_agents_setup_flush(mode: str) -> None:
    """With two threads, the part of an elementwise op that torch hands to its worker flushes subnormals
    when the workers were started by start_workers_flushing (setup_torch calls it), and not otherwise; the
    calling thread is back to not flushing either way. A fresh process: a thread takes the setting once,
    from the thread that starts it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _WORKERS, mode], capture_output=True, text=True, check=True)
    main_flushing, zeros, n = out.stdout.split()
    assert main_flushing == "False"
    if mode == "flushing":
        assert 0 < int(zeros) < int(n)  # the worker's share flushed, the caller's not
    else:
        assert int(zeros) == 0
