"""The model in its own process: a crash, a hang or a corrupted heap in the interpreter costs a child
process, never `rl2edge serve`.

`ProcessBackend` has the interface of the in-process backends (runtime.interpreters), so `Policy` runs
on it unchanged: the parent validates and quantizes, the child only invokes. The child opens the model as
the service would, runs it once on zeros (the check that used to be a separate probe) and then answers
requests over a pair of pipes: raw tensor bytes in a fixed order, no pickling, no per-call allocation of
metadata. A call that finds the child dead, or waits past `call_timeout_s`, raises `BackendError` (the
loop's INFERENCE_ERROR: the safe action) and a worker thread starts a new child after a backoff that
grows with each failure in a row; calls fail fast until it is up.

    python -m rl2edge.runtime.model_process MODEL --backend B --threads N --fds R W   # the child
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import os
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import BackendError, ManifestError

_logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0
"""A child that has not loaded and run the model once by then is stuck: the model is refused."""
BACKOFF_S = (0.1, 5.0)
"""First and longest wait before restarting a child that died; doubled after each failure in a row."""

REPLY_SPIN_S = 0.0005
"""The caller polls for the answer this long before it sleeps in select: a policy answers in microseconds,
and a sleeping thread's wake-up (tens of microseconds in a VM) would cost more than the model."""
CHILD_SPIN_S = 0.0025
"""After a warm-up call the child polls for the next request this long before it sleeps: serve's warm-up in
the spin before each slot (plc_bridge.loop, 2 ms by default) wakes it, and the cycle's own call then finds
it awake. After any other call it sleeps at once (its CPU is the PLC connection's and the plant's)."""

_HEADER = struct.Struct("<BI")  # request: op, payload bytes; reply: status, payload bytes
_RUN, _WARM = 1, 2  # ops: run, then sleep until the next request; run, then stay awake for it (CHILD_SPIN_S)
_OK, _ERROR = 0, 1


CRASH_SIGNALS = frozenset({"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGSYS"})
"""Signals a process raises on itself when its code faults: the model (or its interpreter) is to blame.
Any other signal (SIGKILL from the OOM killer or an operator, SIGTERM, SIGHUP...) came from outside."""


def death_by_signal(name: str) -> str:
    """A child's death by the signal `name`, in words that blame whom it should."""
    if name in CRASH_SIGNALS:
        return f"the model process died from {name}"
    return f"the model process was killed by {name} from outside (not a fault of the model file)"


class _StartFailed(ManifestError):
    """A child that did not load and run the model once; `signal_name`: the signal it died from, if any."""

    def __init__(self, message: str, signal_name: str | None):
        super().__init__(message)
        self.signal_name = signal_name


@dataclass
class ProcessStats:
    """What the service reports about its model process (summary and metrics)."""

    starts: int = 0
    crashes: int = 0
    """Children that died (a signal or an exit) or hung past the call timeout and were killed."""
    timeouts: int = 0
    last_failure: str = ""
    signals: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "starts": self.starts,
            "restarts": max(0, self.starts - 1),
            "crashes": self.crashes,
            "timeouts": self.timeouts,
            "signals": dict(self.signals),
            "last_failure": self.last_failure,
        }


class _Spawner:
    """Starts every child from one thread that lives as long as the process. The child asks the kernel for
    SIGKILL when its parent goes (PR_SET_PDEATHSIG), and on Linux the parent is the thread that forked it:
    a child started from a short-lived restart thread would be killed when that thread ends."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[
            tuple[list[str], tuple[int, ...], dict[str, str] | None, concurrent.futures.Future[Any]]
        ] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(
        self, cmd: list[str], fds: tuple[int, ...], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="rl2edge-model-spawner", daemon=True)
                self._thread.start()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((cmd, fds, env, done))
        return done.result()

    def _work(self) -> None:
        while True:
            cmd, fds, env, done = self._jobs.get()
            try:
                done.set_result(
                    subprocess.Popen(
                        cmd, pass_fds=fds, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                )
            except BaseException as exc:  # handed to the caller, which raises it
                done.set_exception(exc)


_spawn = _Spawner()


class _Child:
    """One running child and its pipes."""

    def __init__(
        self,
        module: str,
        model: Path,
        backend: str,
        num_threads: int,
        env: dict[str, str] | None,
        observation_keys: tuple[str, ...] = (),
    ):
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        os.set_blocking(self.from_child, False)  # polled, then select (_read_fd)
        cmd = [sys.executable, "-m", module, str(model), "--backend", backend]
        cmd += ["--threads", str(num_threads), "--fds", str(to_child_r), str(from_child_w)]
        if observation_keys:
            cmd += ["--keys", ",".join(observation_keys)]
        try:
            self.proc = _spawn(
                cmd, (to_child_r, from_child_w), None if env is None else {**os.environ, **env}
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)

    def meta(self, timeout_s: float, name: str) -> dict[str, Any]:
        """The child's description of the model, once it has loaded and run it; ManifestError or
        BackendError saying why not."""
        try:
            status, payload = self.reply(timeout_s)
        except BackendError as exc:
            why = self.death(str(exc), timeout_s)
            self.kill()
            code = self.proc.returncode
            sig = signal.Signals(-code).name if code is not None and code < 0 else None
            if sig is not None and sig not in CRASH_SIGNALS:
                raise _StartFailed(f"{name}: {why} while it loaded the model; start again", sig) from None
            raise _StartFailed(
                f"{name}: {why} when loading and running it once; the file is corrupt or not a model this "
                "interpreter can run: re-copy or re-export the artifact",
                sig,
            ) from None
        if status != _OK:
            self.kill()
            why = payload.decode(errors="replace")
            if why.startswith("BackendError: "):
                raise BackendError(why[len("BackendError: ") :])
            raise ManifestError(f"{name} failed when loaded and run once in its model process: {why}")
        return json.loads(payload)

    def send(self, op: int, payload: bytes) -> None:
        data = _HEADER.pack(op, len(payload)) + payload
        view = memoryview(data)
        while view:
            view = view[os.write(self.to_child, view) :]

    def reply(self, timeout_s: float) -> tuple[int, bytes]:
        deadline = time.monotonic() + timeout_s
        head = _read_fd(self.from_child, _HEADER.size, deadline, REPLY_SPIN_S)
        status, size = _HEADER.unpack(head)
        return status, _read_fd(self.from_child, size, deadline, REPLY_SPIN_S) if size else b""

    def death(self, how: str, timeout_s: float) -> str:
        """Why the child stopped answering, in words. A hung child is killed at once; one whose pipe
        closed has exited or is exiting (its exit status is waited for briefly)."""
        if how == "timeout":
            self.proc.kill()
            return f"the model process did not answer within {timeout_s * 1e3:.0f} ms and was killed"
        try:
            code = self.proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            return death_by_signal(signal.Signals(-code).name)
        if code is not None:
            return f"the model process exited with status {code}"
        return f"the model process stopped answering ({how})"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class ProcessBackend:
    """A model run by a child process, with the interface of runtime.interpreters' backends."""

    child_module = "rl2edge.runtime.model_process"
    """What the child runs (`python -m`); the tests' fault-injecting child replaces it in a subclass."""
    child_env: dict[str, str] | None = None
    """Variables set for the child on top of this process's environment."""

    def __init__(
        self,
        model_path: Path,
        backend: str = "auto",
        num_threads: int = 1,
        call_timeout_s: float = 1.0,
        observation_keys: tuple[str, ...] = (),
    ):
        self.model_path, self._engine, self._threads = Path(model_path), backend, num_threads
        self._keys = tuple(observation_keys)
        self.call_timeout_s = call_timeout_s
        self.stats = ProcessStats()
        self._lock = threading.Lock()
        self._restarting: threading.Thread | None = None
        self._failures_in_a_row = 0
        self._closed = False
        child = self._start()  # refuses the model here, with one line, if it cannot load and run once
        meta = self._meta
        self.name = f"{meta['engine']} (model process)"
        self.format = meta["format"]
        self.input_name, self.output_name = meta["input_name"], meta["output_name"]
        self.input_shape = tuple(meta["input_shape"])
        self.input_dtype = np.dtype(meta["input_dtype"])
        self.output_dtype = np.dtype(meta["output_dtype"])
        self.input_quant = _quant(meta["input_quant"])
        self.output_quant = _quant(meta["output_quant"])
        self.extra_inputs = {n: n for n in meta["extra_inputs"]}
        self.extra_outputs = {n: n for n in meta["extra_outputs"]}
        self.key_sizes = tuple((str(n), int(s)) for n, s in meta["key_sizes"])
        self._out = (tuple(meta["output_shape"]), self.output_dtype)
        self._extra_out = [(n, tuple(s), np.dtype(d)) for n, s, d in meta["extra_outputs_spec"]]
        self._extra_in = [n for n, _, _ in meta["extra_inputs_spec"]]
        self._child: _Child | None = child

    # ------------------------------------------------------------------------------------ lifecycle
    def _start(self) -> _Child:
        child = _Child(
            self.child_module, self.model_path, self._engine, self._threads, self.child_env, self._keys
        )
        self._meta = child.meta(START_TIMEOUT_S, self.model_path.name)
        self.stats.starts += 1
        _logger.info("%s runs in model process %d", self.model_path.name, child.proc.pid)
        return child

    def _failed(self, child: _Child, how: str) -> str:
        """Count a dead or hung child, kill it, and start a new one in the background after a backoff."""
        why = child.death(how, self.call_timeout_s)
        child.kill()
        with self._lock:
            if self._child is child:
                self._child = None
            self.stats.crashes += 1
            self.stats.timeouts += int(how == "timeout")
            code = child.proc.returncode
            if code is not None and code < 0:
                sig = signal.Signals(-code).name
                self.stats.signals[sig] = self.stats.signals.get(sig, 0) + 1
            self.stats.last_failure = why
            self._failures_in_a_row += 1
            delay = min(BACKOFF_S[0] * 2 ** (self._failures_in_a_row - 1), BACKOFF_S[1])
            if self._restarting is None and not self._closed:
                self._restarting = threading.Thread(
                    target=self._restart, args=(delay,), name="rl2edge-model-restart", daemon=True
                )
                self._restarting.start()
        _logger.error("%s: %s; restarting it in %.1f s", self.model_path.name, why, delay)
        return why

    def _restart(self, delay: float) -> None:
        while not self._closed:
            time.sleep(delay)
            try:
                child = self._start()
            except (BackendError, ManifestError, OSError) as exc:
                with self._lock:
                    if isinstance(exc, _StartFailed):  # a death during the restart is a death too
                        self.stats.crashes += 1
                        if exc.signal_name is not None:
                            self.stats.signals[exc.signal_name] = (
                                self.stats.signals.get(exc.signal_name, 0) + 1
                            )
                    self._failures_in_a_row += 1
                    delay = min(BACKOFF_S[0] * 2 ** (self._failures_in_a_row - 1), BACKOFF_S[1])
                    self.stats.last_failure = str(exc)
                _logger.error("%s: the model process did not start again (%s); next try in %.1f s",
                              self.model_path.name, exc, delay)  # fmt: skip
                continue
            with self._lock:
                if self._closed:
                    child.kill()
                else:
                    self._child = child
                self._restarting = None
            return
        with self._lock:
            self._restarting = None

    def close(self) -> None:
        """Stop the child (and any restart): the backend is not used again."""
        with self._lock:
            self._closed = True
            child, self._child = self._child, None
        if child is not None:
            child.kill()

    def __del__(self) -> None:  # a policy dropped without close(): no orphan child
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------------------------------- calls
    def _call(self, payload: bytes, op: int = _RUN) -> bytes:
        child = self._child
        if child is None:
            raise BackendError(
                f"the model process of {self.model_path.name} is restarting after: {self.stats.last_failure}"
            )
        try:
            child.send(op, payload)
            status, reply = child.reply(self.call_timeout_s)
        except BackendError as exc:
            raise BackendError(self._failed(child, str(exc))) from None
        except OSError as exc:  # the pipe broke: the child is gone
            raise BackendError(self._failed(child, f"pipe: {exc.strerror or exc}")) from None
        if status != _OK:
            raise BackendError(reply.decode(errors="replace"))
        self._failures_in_a_row = 0
        return reply

    def run(self, x: np.ndarray, op: int = _RUN) -> np.ndarray:
        reply = self._call(np.ascontiguousarray(x, self.input_dtype).tobytes(), op)
        shape, dtype = self._out
        return np.frombuffer(reply, dtype, count=int(np.prod(shape))).reshape(shape)

    def run_with(
        self, x: np.ndarray, feeds: dict[str, np.ndarray], op: int = _RUN
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        parts = [np.ascontiguousarray(x, self.input_dtype).tobytes()]
        parts += [np.ascontiguousarray(feeds[n], np.float32).tobytes() for n in self._extra_in]
        reply = self._call(b"".join(parts), op)
        shape, dtype = self._out
        at = int(np.prod(shape)) * dtype.itemsize
        y = np.frombuffer(reply, dtype, count=int(np.prod(shape))).reshape(shape)
        extras = {}
        for name, s, d in self._extra_out:
            n = int(np.prod(s)) * d.itemsize
            extras[name] = np.frombuffer(reply[at : at + n], d).reshape(s)
            at += n
        return y, extras

    def warm_run(self, x: np.ndarray) -> np.ndarray:
        """`run`, and the child stays awake for the next call (Policy.warm_up, just before a cycle)."""
        return self.run(x, _WARM)

    def warm_run_with(
        self, x: np.ndarray, feeds: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.run_with(x, feeds, _WARM)


def _quant(q: list[float] | None) -> tuple[float, int] | None:
    return None if q is None else (float(q[0]), int(q[1]))


# ------------------------------------------------------------------------------------------ the child
def _serve_child(
    model: Path, backend: str, num_threads: int, rfd: int, wfd: int, keys: tuple[str, ...] = ()
) -> int:
    """Open the model, run it once on zeros, describe it, then answer run requests until the pipe closes."""
    _die_with_parent()
    from rl2edge.runtime.interpreters import open_backend
    from rl2edge.runtime.model_check import _extra_shape

    def reply(status: int, payload: bytes) -> None:
        data = memoryview(_HEADER.pack(status, len(payload)) + payload)
        while data:
            data = data[os.write(wfd, data) :]

    try:
        b = open_backend(model, backend, num_threads, keys)
        extra_in = [(n, _extra_shape(b, n), "float32") for n in b.extra_inputs]
        x = np.zeros(b.input_shape, b.input_dtype)
        zeros = {n: np.zeros(s, np.float32) for n, s, _ in extra_in}
        y, extras = b.run_with(x, zeros) if extra_in else (b.run(x), {})
    except (BackendError, ManifestError, ValueError, RuntimeError) as exc:
        reply(_ERROR, f"{type(exc).__name__}: {exc}".splitlines()[0].encode())
        return 3
    y = np.asarray(y)
    meta = {
        "engine": b.name,
        "format": b.format,
        "input_name": b.input_name,
        "output_name": b.output_name,
        "input_shape": list(b.input_shape),
        "input_dtype": str(np.dtype(b.input_dtype)),
        "output_shape": list(y.shape),
        "output_dtype": str(y.dtype),
        "input_quant": None if b.input_quant is None else list(b.input_quant),
        "output_quant": None if b.output_quant is None else list(b.output_quant),
        "extra_inputs": list(b.extra_inputs),
        "extra_outputs": list(b.extra_outputs),
        "key_sizes": [list(k) for k in b.key_sizes],
        "extra_inputs_spec": [[n, list(s), d] for n, s, d in extra_in],
        "extra_outputs_spec": [
            [n, list(np.asarray(v).shape), str(np.asarray(v).dtype)] for n, v in extras.items()
        ],
    }
    reply(_OK, json.dumps(meta).encode())
    x_bytes = x.nbytes
    feeds_spec = [(n, s, int(np.prod(s)) * 4) for n, s, _ in extra_in]
    os.set_blocking(rfd, False)
    op = _RUN
    while True:
        try:
            head = _read_fd(rfd, _HEADER.size, None, CHILD_SPIN_S if op == _WARM else 0.0)
            op, size = _HEADER.unpack(head)
            payload = _read_fd(rfd, size, None, CHILD_SPIN_S)  # it follows its header at once
        except BackendError:
            return 0  # the parent closed the pipe: it is done with this model
        try:
            xin = np.frombuffer(payload, b.input_dtype, count=x.size).reshape(b.input_shape)
            if feeds_spec:
                at, feeds = x_bytes, {}
                for n, s, nbytes in feeds_spec:
                    feeds[n] = np.frombuffer(payload[at : at + nbytes], np.float32).reshape(s)
                    at += nbytes
                out, ex = b.run_with(xin, feeds)
                data = np.asarray(out).tobytes() + b"".join(np.asarray(ex[n]).tobytes() for n in extras)
            else:
                data = np.asarray(b.run(xin)).tobytes()
        except (BackendError, ValueError, RuntimeError) as exc:
            reply(_ERROR, f"{b.name} failed to run the model: {exc}".encode())
            continue
        reply(_OK, data)


def _read_fd(fd: int, n: int, deadline: float | None, spin_s: float) -> bytes:
    """n bytes from a non-blocking pipe: polled for `spin_s`, then waited for in select until `deadline`
    (time.monotonic; None: no limit). BackendError("timeout") past the deadline, ("closed") at EOF."""
    chunks, left = [], n
    spin_until = time.monotonic() + spin_s
    while left:
        try:
            chunk = os.read(fd, left)
        except BlockingIOError:
            now = time.monotonic()
            if now < spin_until:
                os.sched_yield()  # on a busy core, the process we wait for may be the one queued behind us
                continue
            wait = None if deadline is None else deadline - now
            if wait is not None and wait <= 0:
                raise BackendError("timeout") from None
            if not select.select([fd], [], [], wait)[0]:
                raise BackendError("timeout") from None
            continue
        if not chunk:
            raise BackendError("closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _die_with_parent() -> None:
    """Linux: the child gets SIGKILL when the service dies, even while it hangs in the interpreter."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rl2edge.runtime.model_process")
    ap.add_argument("model", type=Path)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fds", type=int, nargs=2, required=True)
    ap.add_argument("--keys", default="", help="a Dict observation's keys, comma-separated, in order")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the service, which stops the child
    keys = tuple(k for k in args.keys.split(",") if k)
    rfd, wfd = args.fds
    return _serve_child(args.model, args.backend, args.threads, rfd, wfd, keys)


if __name__ == "__main__":
    sys.exit(main())
