"""Shared fixtures: tiny real training runs and real exports, made once per test session.

On the edge install (no torch, no TensorFlow: `make test-edge`), $RL2EDGE_TEST_ARTIFACTS names a folder
of the same artifacts made beforehand by the workstation (testkit.runs.build_artifacts), and the artifact
fixtures take them from there. The runs and exports themselves: testkit.runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit.runs import A2C_RUN, AGV_RUN, RAINBOW_RUN, export_run, flipped_run, tiny_train

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
PREBUILT = os.environ.get("RL2EDGE_TEST_ARTIFACTS")


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


def _artifacts(request: pytest.FixtureRequest, run_fixture: str, name: str, quantize: str):
    """(report, artifacts) of `run_fixture` exported in `quantize`; prebuilt ones on the edge run (the
    report is then None)."""
    if PREBUILT:
        return None, Path(PREBUILT) / name
    out = request.getfixturevalue("tmp_path_factory").mktemp(name) / quantize
    return export_run(request.getfixturevalue(run_fixture), out, quantize), out


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
    export_run(run, tmp / "fp32", "fp32")
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


@pytest.fixture(scope="session")
def agv_dict_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train(out=tmp_path_factory.mktemp("agv") / "run", **AGV_RUN)


@pytest.fixture(scope="session")
def agv_dict_fp32(request: pytest.FixtureRequest):
    """The AGV example's Dict env (lidar, imu, goal, speed), briefly trained, fp32: (report, artifact)."""
    return _artifacts(request, "agv_dict_run", "agv-dict-fp32", "fp32")
