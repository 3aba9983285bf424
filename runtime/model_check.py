"""A model file cannot take the service down: its structure is checked, then it is loaded and run once in
a short-lived child process before the serving process touches it.

Why a child: the TFLite interpreters do not verify a flatbuffer before using it (the Python `Interpreter`
builds the model without `tflite::Verifier`), so a corrupt file whose hash was recomputed can read out of
bounds and kill the process with SIGSEGV. A signal in the child is an answer (refuse the artifact with one
line); in the service it would be an outage with no message.

The structural check (runtime.flatbuffer_verify) walks the whole flatbuffer without trusting any offset:
every table, vector and string inside the file, strings UTF-8, indices in range, buffers apart from the
tables. A corrupt file fails there with a clear message, the same way every run, before a child is
started; the child is the backstop for what structure cannot show (a kernel that crashes on its values).

    python -m rl2edge.runtime.model_check MODEL [--backend auto] [--threads 1]   # the child's entry point
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

from rl2edge.errors import BackendError, ManifestError
from rl2edge.runtime.flatbuffer_verify import verify_tflite

_logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
"""Loading the largest policies (a Nature-CNN) takes well under a second; a child that takes minutes is
stuck, and the artifact is refused rather than waited on forever."""
_probed: set[tuple[str, str, int]] = set()
"""(sha256, backend, threads) already run in a child by this process: a test session or a benchmark
loads the same artifact many times, the service once."""


def check_tflite_structure(path: Path) -> None:
    """ManifestError (one line) unless the .tflite file's whole flatbuffer structure checks out
    (runtime.flatbuffer_verify): the same verdict for the same bytes, every run."""
    verify_tflite(path.read_bytes(), path.name)


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
