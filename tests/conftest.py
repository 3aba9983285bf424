"""Shared fixtures: tiny real training runs and real exports, made once per test run.

Once per run, not once per process: under pytest-xdist (`make test` runs two workers) each worker has its own
session, so the runs and artifacts are built under a lock in a folder the workers share (`_once`), by the
first worker that needs them; the other waits and reads them.

On the edge install (no torch, no TensorFlow: `make test-edge`), $RL2EDGE_TEST_ARTIFACTS names a folder
of the same artifacts made beforehand by the workstation (testkit.runs.build_artifacts), and the artifact
fixtures take them from there. The runs and exports themselves: testkit.runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.runs import A2C_RUN, AGV_RUN, RAINBOW_RUN, export_run, flipped_run, tiny_train

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
PREBUILT = os.environ.get("RL2EDGE_TEST_ARTIFACTS")


def _once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """`build(folder)` run once per test run, whichever xdist worker asks first; the folder it filled.
    The others wait on the lock. A build that failed leaves no mark, so the next one tries again (and
    fails the same way, in its own test)."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # gw0, gw1: siblings under the run's own folder
        root = root.parent
    folder = root / "shared" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "shared" / f"{name}.done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (root / "shared" / f"{name}.done").touch()
    return folder


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _once(tmp_path_factory, "cp", lambda d: tiny_train("CartPole-v1", d / "run", steps=4096)) / "run"


@pytest.fixture(scope="session")
def pendulum_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(d: Path) -> None:
        tiny_train("Pendulum-v1", d / "run", steps=2048, n_envs=2, n_steps=512, batch_size=256)

    return _once(tmp_path_factory, "pd", build) / "run"


def _artifacts(request: pytest.FixtureRequest, run_fixture: str, name: str, quantize: str):
    """(report, artifacts) of `run_fixture` exported in `quantize`: the report as report.json holds it (with
    `all`; None for one mode, and on the edge run, whose artifacts are prebuilt)."""
    if PREBUILT:
        return None, Path(PREBUILT) / name
    run = request.getfixturevalue(run_fixture)
    out = _once(
        request.getfixturevalue("tmp_path_factory"), name, lambda d: export_run(run, d / quantize, quantize)
    )
    out = out / quantize
    report = out / "report.json"
    return (json.loads(report.read_text()) if report.is_file() else None), out


@pytest.fixture(scope="session")
def cartpole_all(request: pytest.FixtureRequest):
    """CartPole exported in every mode: (report, artifacts root)."""
    return _artifacts(request, "cartpole_run", "cartpole-all", "all")


@pytest.fixture(scope="session")
def cartpole_flipped(request: pytest.FixtureRequest) -> Path:
    """CartPole fp32 from `flipped_run` of the cartpole run (the artifact folder)."""
    if PREBUILT:
        return Path(PREBUILT) / "cartpole-flipped"
    run = request.getfixturevalue("cartpole_run")

    def build(d: Path) -> None:
        export_run(flipped_run(run, d / "run"), d / "fp32", "fp32")

    return _once(request.getfixturevalue("tmp_path_factory"), "cp_flipped", build) / "fp32"


@pytest.fixture(scope="session")
def a2c_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _once(tmp_path_factory, "a2c", lambda d: tiny_train("CartPole-v1", d / "run", **A2C_RUN)) / "run"


@pytest.fixture(scope="session")
def rainbow_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return (
        _once(tmp_path_factory, "rainbow", lambda d: tiny_train("CartPole-v1", d / "run", **RAINBOW_RUN))
        / "run"
    )


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
    return _once(tmp_path_factory, "agv", lambda d: tiny_train(out=d / "run", **AGV_RUN)) / "run"


@pytest.fixture(scope="session")
def agv_dict_fp32(request: pytest.FixtureRequest):
    """The AGV example's Dict env (lidar, imu, goal, speed), briefly trained, fp32: (report, artifact)."""
    return _artifacts(request, "agv_dict_run", "agv-dict-fp32", "fp32")
