"""The type check of `make test` (scripts/typecheck.py: mypy over all five packages with pyproject's
settings) is strict enough to matter: code that hands a spec's old JSON dict where the typed spec goes, or
indexes a typed spec as the dict it replaced, fails it; the training and export side as the device side."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _typecheck_module():
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / "scripts" / "typecheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mypy(source: str, tmp_path: Path) -> str:
    pytest.importorskip("mypy")
    shape = _typecheck_module().installed_shape(tmp_path / "shape")
    (tmp_path / "user.py").write_text(source)
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    cmd += ["--cache-dir", str(tmp_path / "cache"), str(tmp_path / "user.py")]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={"MYPYPATH": str(shape), "PATH": "/usr/bin:/bin"}
    )
    return proc.stdout + proc.stderr


def test_a_spec_used_as_its_old_json_dict_fails_the_type_check(tmp_path: Path) -> None:
    out = _mypy(
        "from rl2edge.runtime.manifest import Manifest\n"
        "from rl2edge.specs import ActionSpec, ObservationSpec\n"
        "\n"
        "def low(spec: ActionSpec) -> float:\n"
        "    return spec['low'][0]\n"
        "\n"
        "def width(m: Manifest) -> int:\n"
        "    return m.observation['shape'][0]\n"
        "\n"
        "def size(spec: ObservationSpec) -> int:\n"
        "    return spec.size\n"
        "\n"
        "size({'type': 'box', 'shape': [4]})\n",
        tmp_path,
    )
    assert 'Value of type "ActionSpec" is not indexable' in out, out
    assert 'Value of type "ObservationSpec" is not indexable' in out, out
    assert 'expected "ObservationSpec"' in out, out
    assert "Found 3 errors" in out, out


def test_the_checkpoint_types_are_checked_too(tmp_path: Path) -> None:
    """train/ and export/ are checked as the device's packages are: the network spec and the checkpoint
    are types, not the JSON dicts they replaced."""
    out = _mypy(
        "from rl2edge.train.core.checkpoint import Checkpoint\n"
        "from rl2edge.train.core.network_spec import NetworkSpec\n"
        "from rl2edge.train.torch_backend.nets import ActorCritic\n"
        "\n"
        "def width(ckpt: Checkpoint) -> int:\n"
        "    return ckpt.network['obs_dim']\n"
        "\n"
        "def meta(ckpt: Checkpoint) -> object:\n"
        "    return ckpt.meta\n"
        "\n"
        "ActorCritic.from_network_spec({'type': 'actor_critic_mlp', 'obs_dim': 4})\n",
        tmp_path,
    )
    assert 'Value of type "NetworkSpec" is not indexable' in out, out
    assert '"Checkpoint" has no attribute "meta"' in out, out
    assert 'expected "NetworkSpec"' in out, out
    assert "Found 3 errors" in out, out


def test_every_package_is_checked() -> None:
    assert set(_typecheck_module().CHECKED) == {
        "rl2edge", "rl2edge.cli", "rl2edge.runtime", "rl2edge.plc_bridge", "rl2edge.train", "rl2edge.export"
    }  # fmt: skip
