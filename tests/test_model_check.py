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

from rl2edge.errors import ManifestError
from rl2edge.runtime import Policy, model_check
from rl2edge.runtime.model_check import check_tflite_structure, probe_in_child
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
    """40 copies of a real model with 8 random bit flips each, through Policy.load in a process of their
    own (so that a crash shows as a signal here instead of taking pytest down): a loaded policy or one
    line, never a signal. On this model about 1 in 7 such copies crashes the interpreter in the probe's
    child; of 150 copies that passed the walk and the probe, none crashed in 5 later loads each."""
    src = cartpole_all[1] / "int8"
    model = (src / "policy.tflite").read_bytes()
    rng = random.Random(1)
    arts = []
    for k in range(40):
        b = bytearray(model)
        for _ in range(8):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        arts.append(str(_with_model(src, tmp_path / f"flip{k}", bytes(b))))
    code = (
        "import json, sys\n"
        "from rl2edge.errors import Rl2EdgeError\n"
        "from rl2edge.runtime import Policy\n"
        "out = {}\n"
        "for a in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        Policy.load(a)\n"
        "        out[a] = 'loaded'\n"
        "    except Rl2EdgeError as exc:\n"
        "        assert '\\n' not in str(exc)\n"
        "        out[a] = 'crashed in the child' if 'crashed the interpreter' in str(exc) else 'refused'\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(arts)], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    counts = {v: list(outcomes.values()).count(v) for v in set(outcomes.values())}
    assert len(outcomes) == 40 and counts.get("refused", 0) > 0, counts


def test_the_probe_runs_once_per_model_and_process(cartpole_all, monkeypatch) -> None:
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(model_check.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    monkeypatch.setattr(model_check, "_probed", set())
    for _ in range(3):
        Policy.load(cartpole_all[1] / "fp32")
    Policy.load(cartpole_all[1] / "fp32", probe=False)
    assert len(calls) == 1
