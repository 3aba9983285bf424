"""The artifact contract (export -> runtime): a directory with manifest.json and the model files.

The manifest is versioned and records the I/O specs, tensor names and quantization parameters, what is
folded into the graph, how it was quantized and verified, the source checkpoint's hash, tool versions,
and a sha256 of every other file. `load_manifest` refuses an artifact that does not check out.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ManifestError
from rl2edge.fileio import read_json_document, sha256_file, write_json_atomic
from rl2edge.runtime.manifest_schema import MAX_MANIFEST_BYTES, bare_name, check_manifest
from rl2edge.specs import ActionSpec, ObservationSpec

MANIFEST_FILE = "manifest.json"
SCHEMA = "rl2edge-artifact"
SCHEMA_VERSION = 1
_REQUIRED = ("observation", "action", "model", "folded", "quantization", "source", "files")


@dataclass(frozen=True)
class Manifest:
    path: Path  # the artifact directory, as given
    data: dict[str, Any]
    real: Path | None = None
    """`path` resolved when the manifest was loaded; every file is read from there, so a symlink swapped
    during or after the load (a deployer's `current`) never mixes two artifacts."""

    @cached_property
    def observation(self) -> ObservationSpec:
        """The observation spec, parsed once from the JSON that load_manifest checked."""
        return ObservationSpec.from_json(self.data["observation"])

    @cached_property
    def action(self) -> ActionSpec:
        """The action spec, parsed from the JSON once."""
        return ActionSpec.from_json(self.data["action"])

    @property
    def model(self) -> dict[str, Any]:
        return self.data["model"]

    @property
    def quantization(self) -> dict[str, Any]:
        return self.data["quantization"]

    def file(self, name: str) -> Path:
        return (self.real or self.path) / bare_name(name, "file", self.path)

    @cached_property
    def io_digest(self) -> str:
        """sha256 of what the plant's wiring depends on, and no more: the observation's shape and Dict keys
        (name, number of values), the action's kind and range. Two artifacts with one digest fit the same
        node map and PLC (serve's update check compares the same things); retraining keeps it, another
        observation layout changes it. A fleet engine's `depends` carries it (docs/fleet.md)."""
        obs, act = self.observation, self.action
        layout: dict[str, Any] = {
            "observation": {"shape": list(obs.shape), "keys": [[k.name, k.size] for k in obs.keys]},
        }
        if act.discrete:
            layout["action"] = {"discrete": list(act.index_range)}
        elif act.multi_discrete:
            layout["action"] = {"multi_discrete": [b.tolist() for b in act.index_bounds]}
        else:
            low, high = (
                np.broadcast_to(np.asarray(b, np.float64), act.shape).ravel().tolist()
                for b in (act.low, act.high)
            )
            layout["action"] = {"box": [list(act.shape), low, high]}
        text = json.dumps(layout, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def file_hashes(artifact_dir: Path) -> dict[str, str]:
    """sha256 of every file in the artifact but the manifest itself."""
    return {
        p.relative_to(artifact_dir).as_posix(): sha256_file(p)
        for p in sorted(artifact_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST_FILE
    }


def write_manifest(artifact_dir: Path, data: dict[str, Any]) -> Manifest:
    data = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **data, "files": file_hashes(artifact_dir)}
    write_json_atomic(artifact_dir / MANIFEST_FILE, data, inline_scalar_lists=True)
    return Manifest(artifact_dir, data)


def load_manifest(artifact_dir: str | Path) -> Manifest:
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise ManifestError(
            f"artifact directory {artifact_dir} does not exist; pass the --out of `rl2edge export`"
        )
    real = Path(os.path.realpath(artifact_dir))  # once: what a swapped symlink pointed at when loaded
    path = real / MANIFEST_FILE
    if not path.is_file():
        hint = ""
        modes = sorted(p.parent.name for p in artifact_dir.glob(f"*/{MANIFEST_FILE}"))
        if modes:
            hint = f" (it holds one artifact per mode: {', '.join(str(artifact_dir / m) for m in modes)})"
        raise ManifestError(f"{artifact_dir} holds no {MANIFEST_FILE}; it is not an rl2edge artifact{hint}")
    data = read_json_document(
        path,
        what="manifest",
        kind=("schema", SCHEMA),
        version=("schema_version", SCHEMA_VERSION),
        required=_REQUIRED,
        error=ManifestError,
        fix="re-export the artifact (or upgrade the runtime to one that reads it)",
        max_bytes=MAX_MANIFEST_BYTES,
    )
    try:
        check_manifest(data, artifact_dir)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}; re-export the artifact") from None
    for name, expected in data["files"].items():
        f = real / name
        if not f.is_file():
            raise ManifestError(f"artifact file {f} named in the manifest is missing; re-copy the artifact")
        if sha256_file(f) != expected:
            raise ManifestError(
                f"artifact file {f} does not match its sha256 in the manifest (tampered or corrupted); "
                "re-copy or re-export the artifact"
            )
    if data["model"]["file"] not in data["files"]:
        raise ManifestError(
            f"{path}: the model file {data['model']['file']} is not covered by the file hashes"
        )
    return Manifest(artifact_dir, data, real)
