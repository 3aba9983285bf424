"""A seeded corpus of corrupt TFLite models, and the judge that gives each the verdict `evaluate`, `serve` and a
hot update give it: the structure verifier (runtime.flatbuffer_verify), then, for a file that passes, a
load and one run in a separate process (runtime.model_check's child, kept alive between files so that a
corpus of thousands takes minutes; a worker that dies is that file's verdict and is replaced).

A verdict is a string: `accepted`, `refused: <the one-line reason>`, `crashed: <signal>` or
`traceback: <exception type>`. The corpus is judged several times; a file's verdicts must be equal.

The oracle we did not write: the TFLite schema's own generated reader (`ai_edge_litert.tools.
flatbuffer_utils`, the flatbuffers object API) unpacks every table the schema names. A file it cannot
read is broken, and must be refused."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rl2edge.errors import Rl2EdgeError
from rl2edge.runtime.flatbuffer_verify import FlatbufferVerifier

_VERIFIER_WORDS = re.compile(r"^refused: \S+ (is corrupt|is not a TFLite model)")
KINDS = ("flip", "structure_flip", "structure_word", "truncate", "zero_run")


def artifact_with_model(src: Path, dst: Path, model: bytes) -> Path:
    """A copy of the artifact `src` whose policy.tflite is `model`, its sha256 fixed in the manifest as an
    attacker (or a careless script) would."""
    shutil.copytree(src, dst)
    (dst / "policy.tflite").write_bytes(model)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["files"]["policy.tflite"] = hashlib.sha256(model).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@dataclass(frozen=True)
class Corruption:
    model: str
    index: int
    kind: str
    data: bytes


def corruptions(model: bytes, name: str, count: int, seed: int) -> Iterator[Corruption]:
    """`count` corruptions of `model`, the same ones for the same seed: bytes flipped anywhere (mostly in
    the weights), bytes flipped and 4-byte words overwritten inside the tables, vtables, vectors and strings
    (what the verifier is for), truncations, and runs of zeros."""
    rng = random.Random(f"{name}:{seed}")
    verifier = FlatbufferVerifier(model, name)
    verifier.verify()
    structure = [p for a, b, _ in verifier.regions for p in range(a, b)]
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        data = bytearray(model)
        if kind == "flip":
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == "structure_flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.choice(structure)] ^= 1 << rng.randrange(8)
        elif kind == "structure_word":
            at = min(rng.choice(structure) & ~3, len(data) - 4)
            value = rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, len(data), len(data) - 4, rng.getrandbits(32)])
            struct.pack_into("<I", data, at, value)
        elif kind == "truncate":
            data = data[: rng.randrange(len(data))]
        else:
            at = rng.randrange(len(data))
            n = min(rng.randint(1, 64), len(data) - at)
            data[at : at + n] = bytes(n)
        if bytes(data) == model:  # a flip undone by another: flip one more byte
            data[rng.choice(structure)] ^= 0xFF
        yield Corruption(name, i, kind, bytes(data))


_WORKER = r"""
import json, sys
from pathlib import Path
from rl2edge.runtime.model_check import _run_once
for line in sys.stdin:
    req = json.loads(line)
    try:
        _run_once(Path(req["path"]), "auto", 1, tuple(req["keys"]))
        out = "accepted"
    except Exception as exc:
        out = f"refused: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"""


class Judge:
    """Judges model files as the service does; close() when done."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.worker_deaths = 0

    def _worker(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        return self._proc

    def judge(self, path: Path, keys: tuple[str, ...] = ()) -> str:
        try:
            FlatbufferVerifier(path.read_bytes(), path.name).verify()
        except Rl2EdgeError as exc:
            return f"refused: {exc}"
        except Exception as exc:  # the verifier itself failed: what the issue forbids
            return f"traceback: {type(exc).__name__}"
        proc = self._worker()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"path": str(path), "keys": list(keys)}) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if line:
            return str(json.loads(line))
        code = proc.wait(timeout=30)
        self.worker_deaths += 1
        self._proc = None
        return f"crashed: {signal.Signals(-code).name}" if code < 0 else f"crashed: exit {code}"

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=30)


def schema_reader_refuses(data: bytes) -> bool:
    """True if the TFLite schema's generated object API cannot unpack `data` (the independent oracle)."""
    from ai_edge_litert.tools import flatbuffer_utils

    try:
        model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
        for sg in model.subgraphs or []:
            for t in sg.tensors or []:
                if t.name is not None:
                    bytes(t.name).decode("utf-8")
        return False
    except Exception:
        return True


@dataclass
class FileResult:
    model: str
    index: int
    kind: str
    verdicts: list[str]
    schema_refuses: bool

    @property
    def stable(self) -> bool:
        return len(set(self.verdicts)) == 1

    @property
    def by_verifier(self) -> bool:
        """Refused by the structure verifier, before any interpreter saw the file."""
        return (
            self.verdicts[0].startswith("refused: ") and _VERIFIER_WORDS.search(self.verdicts[0]) is not None
        )

    @property
    def outcome(self) -> str:
        return self.verdicts[0].split(":")[0]


def judge_corpus(
    models: dict[str, tuple[Path, tuple[str, ...]]], per_model: int, runs: int, seed: int, work: Path
) -> list[FileResult]:
    """Each model's `per_model` corruptions judged `runs` times (the whole corpus once per run, so that a
    verdict that depends on what ran before shows too)."""
    corpus = [
        c for name, (path, _) in models.items() for c in corruptions(path.read_bytes(), name, per_model, seed)
    ]
    work.mkdir(parents=True, exist_ok=True)
    files = []
    for c in corpus:
        f = work / f"{c.model}-{c.index:05d}.tflite"
        f.write_bytes(c.data)
        files.append(f)
    verdicts: list[list[str]] = [[] for _ in corpus]
    for _ in range(runs):
        judge = Judge()
        try:
            for c, f, out in zip(corpus, files, verdicts, strict=True):
                out.append(judge.judge(f, models[c.model][1]))
        finally:
            judge.close()
    return [
        FileResult(c.model, c.index, c.kind, v, schema_reader_refuses(c.data))
        for c, v in zip(corpus, verdicts, strict=True)
    ]
