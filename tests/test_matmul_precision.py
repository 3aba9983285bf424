"""`train --matmul-precision`: torch's float32 matmul precision holds for the training phases and only
for them, changes the products where the CPU has bfloat16 kernels, and is refused for TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rl2edge.train.algos import build_config, train
from rl2edge.train.torch_backend.matmul_precision import has_bf16_matmul, matmul_precision
from rl2edge.train.torch_backend.sac import TorchSAC
from testkit.cli import assert_clean_failure, rl2edge

FLOAT32_ERROR, BF16_ERROR = 1e-5, 1e-4


def _product_error() -> float:
    """Relative error of a [256, 256] x [256, 256] float32 product against float64, of its largest entry:
    6.1e-7 in float32 here, 2.3e-3 with bfloat16 operands (8 bits of mantissa). The tests hold float32
    under FLOAT32_ERROR and bfloat16 over BF16_ERROR, a decade apart, each a decade from what was seen."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    exact = x.double() @ w.double()
    return float(((x @ w).double() - exact).abs().max() / exact.abs().max())


def test_the_precision_holds_for_the_training_phases_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short torch SAC run under "medium": in its gradient steps torch's setting is "medium" and, on a
    CPU with AMX or AVX512-BF16, products carry bfloat16's error (see _product_error);
    its evaluations (which choose the checkpoint) and the process after it are at "highest", float32
    products; summary.json records the run's setting."""
    in_steps: list[tuple[str, float]] = []
    at_evaluations: list[str] = []
    step = TorchSAC.train_step

    def spy(self: TorchSAC, *batch: torch.Tensor) -> torch.Tensor:
        in_steps.append((torch.get_float32_matmul_precision(), _product_error()))
        return step(self, *batch)

    def at_evaluation(step: int, result: object) -> bool:
        at_evaluations.append(torch.get_float32_matmul_precision())
        return True

    monkeypatch.setattr(TorchSAC, "train_step", spy)
    cfg = build_config(
        "Pendulum-v1",
        overrides={"n_timesteps": 300, "learning_starts": 100, "eval_freq": 150, "eval_episodes": 1,
                   "net_arch": [16, 16]},
        algo="sac",
    )  # fmt: skip
    before = torch.get_float32_matmul_precision()
    assert before != "medium"
    train("torch", "Pendulum-v1", cfg, 0, tmp_path / "run", device="cpu", progress=False,
          on_evaluation=at_evaluation, matmul_precision="medium")  # fmt: skip
    assert len(in_steps) == 200 and all(precision == "medium" for precision, _ in in_steps)
    if has_bf16_matmul():
        assert all(error > BF16_ERROR for _, error in in_steps), in_steps[:3]
    else:
        assert all(error < FLOAT32_ERROR for _, error in in_steps), in_steps[:3]  # "medium" falls back
    assert at_evaluations and all(precision == before for precision in at_evaluations)
    assert torch.get_float32_matmul_precision() == before
    assert _product_error() < FLOAT32_ERROR
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["matmul_precision"] == "medium"


def test_the_precision_comes_back_after_a_failure() -> None:
    before = torch.get_float32_matmul_precision()
    other = "medium" if before != "medium" else "highest"
    with pytest.raises(RuntimeError, match="inside"):
        with matmul_precision(other):
            assert torch.get_float32_matmul_precision() == other
            raise RuntimeError("inside")
    assert torch.get_float32_matmul_precision() == before


def test_tensorflow_and_unknown_names_are_refused(tmp_path: Path) -> None:
    args = ("train", "--algo", "sac", "--env", "Pendulum-v1", "--steps", "300")
    assert_clean_failure(
        rl2edge(*args, "--framework", "tf", "--matmul-precision", "medium", "--out", tmp_path / "run"),
        "TensorFlow has its own switches",
    )
    assert not (tmp_path / "run").exists()
    proc = rl2edge(*args, "--matmul-precision", "low", "--out", tmp_path / "run")
    assert proc.returncode == 2 and "invalid choice: 'low'" in proc.stderr
    assert not (tmp_path / "run").exists()
