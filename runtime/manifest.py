"""The artifact contract (export -> runtime): a directory with manifest.json and the model files.

The manifest is versioned and records the I/O specs, tensor names and quantization parameters, what is
folded into the graph, how it was quantized and verified, the source checkpoint's hash, tool versions,
and a sha256 of every other file. `load_manifest` refuses an artifact that does not check out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl2edge.errors import ManifestError
from rl2edge.fileio import sha256_file, write_json_atomic
from runtime.manifest_schema import MAX_MANIFEST_BYTES, bare_name, check_manifest

MANIFEST_FILE = "manifest.json"
SCHEMA = "rl2edge-artifact"
SCHEMA_VERSION = 1
_REQUIRED = ("observation", "action", "model", "folded", "quantization", "source", "files")


MAX_NESTING = 32
"""A manifest nests 5 levels deep. The C JSON parser recurses once per level, and a library in the
process may have raised Python's recursion limit (onnx2tf does): a 200,000-deep array then overflows
the C stack and kills the process with SIGSEGV instead of raising RecursionError. So depth is counted
first, without recursion."""
_JSON_TOKENS = re.compile(r'\\.|"|[\[\]{}]', re.S)


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    in_string = False
    for m in _JSON_TOKENS.finditer(text):
        token = m.group()
        if token == '"':
            in_string = not in_string
        elif in_string or token[0] == "\\":
            continue
        elif token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


@dataclass(frozen=True)
class Manifest:
    path: Path  # the artifact directory
    data: dict[str, Any]

    @property
    def observation(self) -> dict[str, Any]:
        return self.data["observation"]

    @property
    def action(self) -> dict[str, Any]:
        return self.data["action"]

    @property
    def model(self) -> dict[str, Any]:
        return self.data["model"]

    @property
    def quantization(self) -> dict[str, Any]:
        return self.data["quantization"]

    def file(self, name: str) -> Path:
        return self.path / bare_name(name, "file", self.path)


def file_hashes(artifact_dir: Path) -> dict[str, str]:
    """sha256 of every file in the artifact but the manifest itself."""
    return {
        p.relative_to(artifact_dir).as_posix(): sha256_file(p)
        for p in sorted(artifact_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST_FILE
    }


def write_manifest(artifact_dir: Path, data: dict[str, Any]) -> Manifest:
    data = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **data, "files": file_hashes(artifact_dir)}
    write_json_atomic(artifact_dir / MANIFEST_FILE, data)
    return Manifest(artifact_dir, data)


def load_manifest(artifact_dir: str | Path) -> Manifest:
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise ManifestError(
            f"artifact directory {artifact_dir} does not exist; pass the --out of `rl2edge export`"
        )
    path = artifact_dir / MANIFEST_FILE
    if not path.is_file():
        hint = ""
        modes = sorted(p.parent.name for p in artifact_dir.glob(f"*/{MANIFEST_FILE}"))
        if modes:
            hint = f" (it holds one artifact per mode: {', '.join(str(artifact_dir / m) for m in modes)})"
        raise ManifestError(f"{artifact_dir} holds no {MANIFEST_FILE}; it is not an rl2edge artifact{hint}")
    size = path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{path} has {size} bytes, over the {MAX_MANIFEST_BYTES} a manifest may have; re-export the artifact"
        )
    try:
        text = path.read_text()
        if _nesting_depth(text) > MAX_NESTING:
            raise ManifestError(
                f"{path} nests deeper than {MAX_NESTING} levels: not a manifest; re-export the artifact"
            )
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}); re-export the artifact") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ManifestError(f"{path} is not an rl2edge manifest (schema field missing or wrong)")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(
            f"{path} has schema_version {data.get('schema_version')!r}; this runtime reads version {SCHEMA_VERSION}. "
            "Re-export the artifact with a matching rl2edge, or upgrade the runtime"
        )
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ManifestError(f"{path} lacks {', '.join(missing)}; re-export the artifact")
    try:
        check_manifest(data, artifact_dir)
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}; re-export the artifact") from None
    for name, expected in data["files"].items():
        f = artifact_dir / name
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
    return Manifest(artifact_dir, data)
