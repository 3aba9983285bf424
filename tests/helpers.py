"""What several test modules use: the installed CLI as users call it, and random mutations of nested
data for the loaders' fuzz tests. Test modules import from here, never from each other."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

EXE = str(Path(sys.executable).with_name("rl2edge"))


def rl2edge(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    for f in fragments:
        assert f in last, last


ODD_SCALARS: list[Any] = [None, True, -1, 0, 2**70, 1e308, float("inf"), float("nan"), "", "abc"]
"""Values no loader expects, for the fuzz tests' mutations (each test adds its own)."""


def paths_of(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested dicts and lists (the first 8 items of a list)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:8]):
            out += paths_of(v, (*prefix, i))
    return out


def mutate(
    data: Any, rng: np.random.Generator, odd: list[Any], drop: float = 0.2, unknown_keys: list[Any] = ()
) -> Any:
    """A deep copy of `data` with 1 to 3 random changes: a value replaced by one of `odd`, a key dropped
    (probability `drop`) or, with `unknown_keys`, a key added that the loader does not know."""
    m = copy.deepcopy(data)
    for _ in range(int(rng.integers(1, 4))):
        paths = paths_of(m)
        if not paths:
            break
        path = paths[int(rng.integers(len(paths)))]
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        r = rng.random()
        if r < drop and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif unknown_keys and r < drop + 0.05 and isinstance(parent, dict):
            parent[unknown_keys[int(rng.integers(len(unknown_keys)))]] = 1
        else:
            parent[path[-1]] = copy.deepcopy(odd[int(rng.integers(len(odd)))])
    return m


def flipped_run(run: Path, out: Path) -> Path:
    """A copy of a discrete-action run whose actor's last layer is negated: the same specs, the opposite
    preference at every observation (argmax of -logits), so it disagrees with the original everywhere
    but at exact ties. What a wrong artifact with the right shape looks like."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    from rl2edge.fileio import sha256_file

    shutil.copytree(run, out)
    ckpt = json.loads((out / "checkpoint.json").read_text())
    weights_file = out / ckpt["weights"]["file"]
    weights = load_file(weights_file)
    last = max(int(k.split(".")[1]) for k in weights if k.startswith("actor.") and k.endswith(".weight"))
    for kind in ("weight", "bias"):
        weights[f"actor.{last}.{kind}"] = -weights[f"actor.{last}.{kind}"]
    save_file(weights, str(weights_file))
    ckpt["weights"]["sha256"] = sha256_file(weights_file)
    (out / "checkpoint.json").write_text(json.dumps(ckpt, indent=2))
    return out


def checkpoint_weights(run: Path) -> dict[str, np.ndarray]:
    """A run directory's weights as arrays by name, for either framework's file (the TF .h5 file's bytes
    differ between identical weights: it records object ids; its arrays do not)."""
    if (run / "policy.safetensors").is_file():
        from safetensors.numpy import load_file

        return dict(load_file(run / "policy.safetensors"))
    import h5py

    out: dict[str, np.ndarray] = {}
    with h5py.File(run / "policy.weights.h5") as f:
        f.visititems(
            lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
        )
    return out


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = checkpoint_weights(a), checkpoint_weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        assert np.array_equal(wa[k], wb[k]), f"{k}: max |diff| {np.abs(wa[k] - wb[k]).max()}"
