"""Shared fixtures: tiny real training runs and real exports, made once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def tiny_train(env_id: str, out: Path, steps: int, seed: int = 0, **overrides: object) -> Path:
    from train.core.config import build_config
    from train.torch_backend.ppo import train_ppo

    cfg = build_config(
        env_id, overrides={"n_timesteps": steps, "eval_freq": 0, "eval_episodes": 2, **overrides}
    )
    out.mkdir(parents=True, exist_ok=True)
    train_ppo(env_id, cfg, seed, out, device="cpu", progress=False)
    return out


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train("CartPole-v1", tmp_path_factory.mktemp("cp") / "run", steps=4096)


@pytest.fixture(scope="session")
def pendulum_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train(
        "Pendulum-v1",
        tmp_path_factory.mktemp("pd") / "run",
        steps=2048,
        n_envs=2,
        n_steps=512,
        batch_size=256,
    )


def _export(run: Path, out: Path, quantize: str):
    from export.pipeline import ExportOptions, export_checkpoint

    return export_checkpoint(
        run, out, ExportOptions(quantize=quantize, calib_episodes=3, eval_episodes=2, progress=False)
    )


@pytest.fixture(scope="session")
def cartpole_all(cartpole_run: Path, tmp_path_factory: pytest.TempPathFactory):
    """CartPole exported in every mode: (report, artifacts root)."""
    out = tmp_path_factory.mktemp("cp_art") / "all"
    return _export(cartpole_run, out, "all"), out


@pytest.fixture(scope="session")
def pendulum_fp32(pendulum_run: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("pd_art") / "fp32"
    return _export(pendulum_run, out, "fp32"), out


@pytest.fixture(scope="session")
def pendulum_int8(pendulum_run: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("pd_art") / "int8"
    return _export(pendulum_run, out, "int8"), out
