"""Run directories as tests handle them: a deliberately wrong copy, and their weights compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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
