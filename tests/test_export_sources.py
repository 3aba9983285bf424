"""The export-source contract (export.source.ExportSource) and the table that chooses a source by path
(export.sources): a new kind is one module and one row, and an option a kind does not take is one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.export import sources
from testkit.cli import assert_clean_failure, rl2edge


def test_an_option_a_source_does_not_take_is_one_line(cartpole_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "art"
    assert_clean_failure(
        rl2edge("export", cartpole_run, "--env", "CartPole-v1", "--out", out),
        "--env:",
        "a run directory written by `rl2edge train`, which does not take it",
        "; --env is for an ONNX file (.onnx), a Stable-Baselines3 model (.zip),",
    )
    assert not out.exists()


def test_a_new_source_is_one_module_and_one_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """testkit.toy_source, written by the recipe: its row added to the table, the export runs through the
    real main() with the pipeline untouched, and its file is held to the source within fp32's tolerance."""
    from testkit.toy_source import KIND

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "policy.npz", weight=rng.normal(size=(1, 3)) * 0.3, bias=np.array([0.1]))
    monkeypatch.setattr(sources, "SOURCES", (KIND, *sources.SOURCES))
    out = tmp_path / "art"
    argv = ["export", str(tmp_path / "policy.npz"), "--env", "Pendulum-v1", "--quantize", "fp32", "--out"]
    argv += [str(out), "--calib-episodes", "2", "--eval-episodes", "2", "--no-progress"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["source"]["kind"] == "toy-linear"
        and manifest["verification"]["reference"] == "linear (torch)"
    )
    parity = manifest["verification"]["tflite_vs_source"]
    assert parity["max_abs_error"] <= manifest["verification"]["tolerances"]["fp32_action_atol"]
    # the option it does not take, as for any other kind: exit 2, nothing written
    again = [a if a != str(out) else str(tmp_path / "art2") for a in argv]
    assert main([*again, "--vecnormalize", "vn.pkl"]) == 2 and not (tmp_path / "art2").exists()
