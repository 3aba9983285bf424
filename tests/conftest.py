"""Shared fixtures: tiny real training runs and real exports, made once per test session.

On the edge install (no torch, no TensorFlow: `make test-edge`), $RL2EDGE_TEST_ARTIFACTS names a folder
of the same artifacts made beforehand by the workstation (`build_artifacts`), and the artifact fixtures
take them from there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit.runs import flipped_run

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
PREBUILT = os.environ.get("RL2EDGE_TEST_ARTIFACTS")


def tiny_train(
    env_id: str,
    out: Path,
    steps: int,
    seed: int = 0,
    algo: str = "ppo",
    framework: str = "torch",
    **overrides: object,
) -> Path:
    from rl2edge.train.algos import build_config, train

    cfg = build_config(
        env_id, overrides={"n_timesteps": steps, "eval_freq": 0, "eval_episodes": 2, **overrides}, algo=algo
    )
    out.mkdir(parents=True, exist_ok=True)
    train(framework, env_id, cfg, seed, out, device="cpu", progress=False)
    return out


# A2C (torch, the ONNX route) and Rainbow with every component on (TF, the SavedModel route), briefly
# trained on CartPole: what the closed-loop serve test runs as int8 files.
A2C_RUN = dict(algo="a2c", framework="torch", steps=8000)
RAINBOW_RUN = dict(algo="rainbow", framework="tf", steps=3000, learning_starts=500)


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
    from rl2edge.export.pipeline import ExportOptions, export_checkpoint

    return export_checkpoint(
        run, out, ExportOptions(quantize=quantize, calib_episodes=3, eval_episodes=2, progress=False)
    )


def _artifacts(request: pytest.FixtureRequest, run_fixture: str, name: str, quantize: str):
    """(report, artifacts) of `run_fixture` exported in `quantize`; prebuilt ones on the edge run (the
    report is then None)."""
    if PREBUILT:
        return None, Path(PREBUILT) / name
    out = request.getfixturevalue("tmp_path_factory").mktemp(name) / quantize
    return _export(request.getfixturevalue(run_fixture), out, quantize), out


@pytest.fixture(scope="session")
def cartpole_all(request: pytest.FixtureRequest):
    """CartPole exported in every mode: (report, artifacts root)."""
    return _artifacts(request, "cartpole_run", "cartpole-all", "all")


@pytest.fixture(scope="session")
def cartpole_flipped(request: pytest.FixtureRequest) -> Path:
    """CartPole fp32 from `flipped_run` of the cartpole run (the artifact folder)."""
    if PREBUILT:
        return Path(PREBUILT) / "cartpole-flipped"
    tmp = request.getfixturevalue("tmp_path_factory").mktemp("cp_flipped")
    run = flipped_run(request.getfixturevalue("cartpole_run"), tmp / "run")
    _export(run, tmp / "fp32", "fp32")
    return tmp / "fp32"


@pytest.fixture(scope="session")
def a2c_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train("CartPole-v1", tmp_path_factory.mktemp("a2c") / "run", **A2C_RUN)


@pytest.fixture(scope="session")
def rainbow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train("CartPole-v1", tmp_path_factory.mktemp("rainbow") / "run", **RAINBOW_RUN)


@pytest.fixture(scope="session")
def a2c_int8(request: pytest.FixtureRequest):
    return _artifacts(request, "a2c_run", "a2c-int8", "int8")


@pytest.fixture(scope="session")
def rainbow_int8(request: pytest.FixtureRequest):
    return _artifacts(request, "rainbow_run", "rainbow-int8", "int8")


@pytest.fixture(scope="session")
def pendulum_fp32(request: pytest.FixtureRequest):
    return _artifacts(request, "pendulum_run", "pendulum-fp32", "fp32")


@pytest.fixture(scope="session")
def pendulum_int8(request: pytest.FixtureRequest):
    return _artifacts(request, "pendulum_run", "pendulum-int8", "int8")


def build_artifacts(out: Path) -> None:
    """The fixtures' artifacts, for the edge test run: out/cartpole-all/<mode>, out/cartpole-flipped,
    out/pendulum-{fp32,int8}, out/a2c-int8, out/rainbow-int8."""
    cp = tiny_train("CartPole-v1", out / "runs" / "cartpole", steps=4096)
    pd = tiny_train(
        "Pendulum-v1", out / "runs" / "pendulum", steps=2048, n_envs=2, n_steps=512, batch_size=256
    )
    _export(cp, out / "cartpole-all", "all")
    _export(flipped_run(cp, out / "runs" / "cartpole-flipped"), out / "cartpole-flipped", "fp32")
    _export(pd, out / "pendulum-fp32", "fp32")
    _export(pd, out / "pendulum-int8", "int8")
    _export(tiny_train("CartPole-v1", out / "runs" / "a2c", **A2C_RUN), out / "a2c-int8", "int8")
    _export(tiny_train("CartPole-v1", out / "runs" / "rainbow", **RAINBOW_RUN), out / "rainbow-int8", "int8")
