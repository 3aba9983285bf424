"""A corrupt model whose hash was recomputed cannot crash the process that loads it: the flatbuffer's
structure is walked first, then the model is loaded and run once in a child process (runtime.model_check).
Before, a truncated policy.tflite killed `evaluate` and `serve` with SIGSEGV (rc -11, no message) in 4 of
6 runs."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rl2edge.runtime import Policy, model_check
from rl2edge.runtime.model_check import check_tflite_structure, probe_in_child

from rl2edge.errors import ManifestError, Rl2EdgeError
from tests.helpers import assert_clean_failure, rl2edge


def _with_model(src: Path, dst: Path, model: bytes) -> Path:
    """A copy of the artifact whose policy.tflite is `model`, its sha256 fixed in the manifest as an
    attacker (or a careless script) would."""
    shutil.copytree(src, dst)
    (dst / "policy.tflite").write_bytes(model)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["files"]["policy.tflite"] = hashlib.sha256(model).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_truncated_models_are_refused_by_the_structure_walk(cartpole_all, tmp_path: Path) -> None:
    model = (cartpole_all[1] / "int8" / "policy.tflite").read_bytes()
    check_tflite_structure(cartpole_all[1] / "int8" / "policy.tflite")  # the real one passes
    f = tmp_path / "cut.tflite"
    for n in range(0, len(model), max(1, len(model) // 97)):  # every cut, from the header to the last buffer
        f.write_bytes(model[:n])
        with pytest.raises(ManifestError, match=r"corrupt or truncated|not a TFLite model|holds no subgraph"):
            check_tflite_structure(f)


def test_evaluate_and_serve_refuse_a_truncated_model_in_one_line(cartpole_all, tmp_path: Path) -> None:
    src = cartpole_all[1] / "int8"
    model = (src / "policy.tflite").read_bytes()
    art = _with_model(src, tmp_path / "cut", model[: int(len(model) * 0.9)])
    proc = rl2edge("evaluate", art, "--env", "CartPole-v1", "--episodes", "1")
    assert_clean_failure(proc, "policy.tflite is corrupt or truncated")
    proc = rl2edge("serve", art, "--endpoint", "opc.tcp://127.0.0.1:1")
    assert_clean_failure(proc, "policy.tflite is corrupt or truncated")


def test_a_child_killed_by_a_signal_is_a_one_line_refusal(tmp_path: Path, monkeypatch) -> None:
    """The parent's side of the probe, with a child that really dies from SIGSEGV (a null read through
    ctypes) in place of a crashing interpreter, which cannot be produced on demand on every interpreter
    version; the fuzz test below runs the real interpreter on corrupt models."""
    crasher = tmp_path / "python"
    crasher.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import ctypes; ctypes.string_at(0)'\n")
    crasher.chmod(0o755)
    monkeypatch.setattr(model_check.sys, "executable", str(crasher))
    with pytest.raises(ManifestError, match=r"crashed the interpreter \(SIGSEGV\)"):
        probe_in_child(tmp_path / "policy.tflite", "auto", 1, "0" * 64)


def test_bit_flipped_models_never_crash_the_loading_process(cartpole_all, tmp_path: Path) -> None:
    """40 copies of a real model with 8 random bit flips each, through Policy.load: a loaded policy or one
    line, never a signal. On this model about 1 in 10 such copies crashes the interpreter (in the child)."""
    src = cartpole_all[1] / "int8"
    model = (src / "policy.tflite").read_bytes()
    rng = random.Random(1)
    outcomes: dict[str, int] = {}
    for k in range(40):
        b = bytearray(model)
        for _ in range(8):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        art = _with_model(src, tmp_path / f"flip{k}", bytes(b))
        try:
            Policy.load(art)
            outcome = "loaded"
        except Rl2EdgeError as exc:
            text = str(exc)
            assert "\n" not in text
            outcome = "crashed in the child" if "crashed the interpreter" in text else "refused"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        shutil.rmtree(art)
    assert sum(outcomes.values()) == 40 and outcomes.get("refused", 0) > 0, outcomes


def test_the_probe_runs_once_per_model_and_process(cartpole_all, monkeypatch) -> None:
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(model_check.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    monkeypatch.setattr(model_check, "_probed", set())
    for _ in range(3):
        Policy.load(cartpole_all[1] / "fp32")
    Policy.load(cartpole_all[1] / "fp32", probe=False)
    assert len(calls) == 1
