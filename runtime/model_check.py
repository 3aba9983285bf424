"""A model file cannot take the service down: its structure is checked, then it is loaded and run once in
a short-lived child process before the serving process touches it.

Why a child: the TFLite interpreters do not verify a flatbuffer before using it (the Python `Interpreter`
builds the model without `tflite::Verifier`), so a corrupt file whose hash was recomputed can read out of
bounds and kill the process with SIGSEGV. A signal in the child is an answer (refuse the artifact with one
line); in the service it would be an outage with no message.

The structural check walks the flatbuffer's offsets (the root table, its vectors, every buffer's data and
every subgraph's vectors) without trusting any of them: a truncated or overwritten file usually fails here
with a clear message, before a child is started. It is not a full verifier (operator tables are not
walked); the child is the backstop.

    python -m rl2edge.runtime.model_check MODEL [--backend auto] [--threads 1]   # the child's entry point
"""

from __future__ import annotations

import argparse
import logging
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from rl2edge.errors import BackendError, ManifestError

_logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
"""Loading the largest policies (a Nature-CNN) takes well under a second; a child that takes minutes is
stuck, and the artifact is refused rather than waited on forever."""
_TFLITE_IDENTIFIER = b"TFL3"
_probed: set[tuple[str, str, int]] = set()
"""(sha256, backend, threads) already run in a child by this process: a test session or a benchmark
loads the same artifact many times, the service once."""


class _Flatbuffer:
    """Bounds-checked reads of a flatbuffer (little-endian offsets, per the flatbuffers spec)."""

    def __init__(self, data: bytes, name: str):
        self.data, self.name = data, name

    def _u32(self, pos: int, what: str) -> int:
        self._need(pos, 4, what)
        return struct.unpack_from("<I", self.data, pos)[0]

    def _need(self, pos: int, size: int, what: str) -> None:
        if pos < 0 or size < 0 or pos + size > len(self.data):
            raise ManifestError(
                f"{self.name} is corrupt or truncated: its {what} lies at bytes {pos}..{pos + size} of a "
                f"{len(self.data)}-byte file; re-copy or re-export the artifact"
            )

    def table(self, pos: int, what: str) -> tuple[int, list[int]]:
        """The table at `pos` and the offsets of its fields (0: absent)."""
        self._need(pos, 4, what)
        vtable = pos - struct.unpack_from("<i", self.data, pos)[0]
        self._need(vtable, 4, f"{what}'s vtable")
        vsize, tsize = struct.unpack_from("<HH", self.data, vtable)
        if vsize < 4 or vsize % 2:
            raise ManifestError(
                f"{self.name} is corrupt: {what} has a malformed vtable; re-export the artifact"
            )
        self._need(vtable, vsize, f"{what}'s vtable")
        self._need(pos, tsize, what)
        fields = list(struct.unpack_from(f"<{(vsize - 4) // 2}H", self.data, vtable + 4))
        for i, off in enumerate(fields):
            if off and off >= tsize:
                raise ManifestError(
                    f"{self.name} is corrupt: field {i} of {what} lies outside the table; re-export the artifact"
                )
        return pos, fields

    def field_ref(self, table: tuple[int, list[int]], index: int, what: str) -> int | None:
        """Where an offset field (vector, string, table) points; None if the field is absent."""
        pos, fields = table
        if index >= len(fields) or not fields[index]:
            return None
        at = pos + fields[index]
        return at + self._u32(at, what)

    def vector(self, table: tuple[int, list[int]], index: int, elem: int, what: str) -> tuple[int, int]:
        """(start of the elements, length); (0, 0) if absent."""
        at = self.field_ref(table, index, what)
        if at is None:
            return 0, 0
        n = self._u32(at, f"{what}'s length")
        self._need(at + 4, n * elem, what)
        return at + 4, n

    def tables(self, table: tuple[int, list[int]], index: int, what: str) -> list[tuple[int, list[int]]]:
        start, n = self.vector(table, index, 4, what)
        return [
            self.table(start + 4 * i + self._u32(start + 4 * i, f"{what}[{i}]"), f"{what}[{i}]")
            for i in range(n)
        ]

    def u64(self, table: tuple[int, list[int]], index: int) -> int:
        pos, fields = table
        if index >= len(fields) or not fields[index]:
            return 0
        self._need(pos + fields[index], 8, "a 64-bit field")
        return struct.unpack_from("<Q", self.data, pos + fields[index])[0]


def check_tflite_structure(path: Path) -> None:
    """ManifestError if the .tflite file is not a well-formed TFLite flatbuffer at the level walked here
    (schema.fbs: Model{version, operator_codes, subgraphs, description, buffers, ...},
    SubGraph{tensors, inputs, outputs, operators, name}, Buffer{data, offset, size})."""
    data = path.read_bytes()
    fb = _Flatbuffer(data, path.name)
    if len(data) < 8 or data[4:8] != _TFLITE_IDENTIFIER:
        raise ManifestError(
            f"{path.name} is not a TFLite model (no {_TFLITE_IDENTIFIER.decode()} identifier); re-export the artifact"
        )
    model = fb.table(fb._u32(0, "root offset"), "model table")
    subgraphs = fb.tables(model, 2, "subgraphs")
    if not subgraphs:
        raise ManifestError(f"{path.name} holds no subgraph; re-export the artifact")
    buffers = fb.tables(model, 4, "buffers")
    fb.tables(model, 1, "operator_codes")
    for i, sg in enumerate(subgraphs):
        fb.tables(sg, 0, f"subgraph {i} tensors")
        fb.vector(sg, 1, 4, f"subgraph {i} inputs")
        fb.vector(sg, 2, 4, f"subgraph {i} outputs")
        fb.tables(sg, 3, f"subgraph {i} operators")
    for i, buf in enumerate(buffers):
        fb.vector(buf, 0, 1, f"buffer {i} data")
        offset, size = fb.u64(buf, 1), fb.u64(buf, 2)
        if offset > 1:  # data kept after the flatbuffer (models over 2 GB); 1 marks an empty buffer
            fb._need(offset, size, f"buffer {i} data")


def probe_in_child(
    path: Path, backend: str, num_threads: int, digest: str, observation_keys: tuple[str, ...] = ()
) -> float:
    """Load and run `path` once in a child process; seconds it took. ManifestError if the child died from
    a signal, failed or hung. Each (digest, backend, threads) is probed once per process."""
    key = (digest, backend, num_threads)
    if key in _probed:
        return 0.0
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "rl2edge.runtime.model_check", str(path), "--backend", backend]
    cmd += ["--threads", str(num_threads)]
    if observation_keys:
        cmd += ["--keys", ",".join(observation_keys)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise ManifestError(
            f"loading and running {path.name} once took over {PROBE_TIMEOUT_S:.0f} s in a test process; "
            "the model is refused (re-export the artifact)"
        ) from None
    took = time.perf_counter() - t0
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise ManifestError(
            f"{path.name} crashed the interpreter ({name}) when loaded and run once in a test process: the "
            "file is corrupt or not a model this interpreter can run; re-copy or re-export the artifact"
        )
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr or "").strip().splitlines() if ln.strip()]
        why = lines[-1] if lines else f"exit status {done.returncode}"
        if why.startswith("BackendError: "):  # the interpreter's own refusal: the same error as in-process
            raise BackendError(why[len("BackendError: ") :])
        raise ManifestError(f"{path.name} failed when loaded and run once in a test process: {why}")
    _probed.add(key)
    _logger.info("%s loaded and ran once in a test process (%.2f s)", path.name, took)
    return took


def _run_once(path: Path, backend: str, num_threads: int, keys: tuple[str, ...] = ()) -> None:
    """The child: open the model as the service would and invoke it on zeros of its input types."""
    import numpy as np

    from rl2edge.runtime.interpreters import open_backend

    b = open_backend(path, backend, num_threads, keys)
    x = np.zeros(b.input_shape, b.input_dtype)
    if b.extra_inputs:
        feeds = {name: np.zeros(_extra_shape(b, name), np.float32) for name in b.extra_inputs}
        b.run_with(x, feeds)
    else:
        b.run(x)


def _extra_shape(b: object, name: str) -> tuple[int, ...]:
    it = getattr(b, "_it", None)
    if it is not None:  # TFLite: the tensor's declared shape
        index = b.extra_inputs[name]  # type: ignore[attr-defined]
        detail = next(d for d in it.get_tensor_details() if d["index"] == index)
        return tuple(int(d) for d in detail["shape"])
    sess = b._sess  # type: ignore[attr-defined]
    shape = next(i.shape for i in sess.get_inputs() if i.name == name)
    return tuple(int(d) if isinstance(d, int) else 1 for d in shape)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m rl2edge.runtime.model_check", description=__doc__.splitlines()[0]
    )
    ap.add_argument("model", type=Path)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keys", default="", help="a Dict observation's keys, comma-separated, in order")
    args = ap.parse_args(argv)
    try:
        _run_once(args.model, args.backend, args.threads, tuple(k for k in args.keys.split(",") if k))
    except (BackendError, ManifestError, ValueError, RuntimeError) as exc:
        sys.stderr.write(f"{type(exc).__name__}: {exc}".splitlines()[0] + "\n")  # the parent reads this line
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
