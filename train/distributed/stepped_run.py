"""A training run that a sweep's scheduler can stop between periodic evaluations.

The run is the ordinary one (`rl2edge.train.algos.train`) in a background thread; after each periodic
evaluation it waits until told to go on or to stop. Stopped, it finishes as every run does (final
evaluation, the checkpoint of its best policy, summary.json), so an early-stopped trial is still an
ordinary run directory that `rl2edge export` takes.
"""

from __future__ import annotations

import io
import queue
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Event:
    kind: str  # "eval", "done" or "error"
    step: int = 0
    eval_return: float = float("nan")
    error: BaseException | None = None


class SteppedRun:
    def __init__(self, framework: str, env_id: str, cfg: Any, seed: int, run_dir: Path):
        self.framework, self.env_id, self.cfg, self.seed, self.run_dir = framework, env_id, cfg, seed, run_dir
        self._events: queue.Queue[Event] = queue.Queue()
        self._go: queue.Queue[bool] = queue.Queue()
        self._paused = False
        self._end: Event | None = None  # the "done" or "error" event, once seen
        self._thread = threading.Thread(target=self._main, name=f"run-s{seed}", daemon=True)
        self._thread.start()

    def _on_evaluation(self, step: int, result: Any) -> bool:
        self._events.put(Event("eval", step, result.mean))
        return self._go.get()

    def _main(self) -> None:
        from rl2edge.train.algos import train

        try:
            r = train(
                self.framework,
                self.env_id,
                self.cfg,
                self.seed,
                self.run_dir,
                device="cpu",
                progress=False,
                on_evaluation=self._on_evaluation,
            )
            self._events.put(Event("done", r.steps, r.final_eval.mean))
        except BaseException as exc:  # handed to the caller, who raises it in its own thread
            self._events.put(Event("error", error=exc))

    def next(self) -> Event:
        """Let the run go on to its next evaluation (or its end); that event."""
        if self._end is not None:
            return self._end
        if self._paused:
            self._go.put(True)
        event = self._events.get()
        self._paused = event.kind == "eval"
        if not self._paused:
            self._end = event
            self._thread.join()
        return event

    def finish(self) -> Event:
        """Stop at the evaluation it waits at (if any) and let it finish; the "done" or "error" event."""
        if self._end is not None:
            return self._end
        if self._paused:
            self._go.put(False)
            self._paused = False
        while True:
            event = self._events.get()
            if event.kind != "eval":  # a run not yet paused may reach one more evaluation
                self._thread.join()
                self._end = event
                return event
            self._go.put(False)


def pack_directory(path: Path) -> bytes:
    """A run directory as a tar archive in memory: runs on other nodes come back to the driver this way,
    without a shared file system (run directories are small: weights, metrics, TensorBoard events)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(path, arcname=".")
    return buf.getvalue()


def store_directory(data: bytes, dest: Path) -> None:
    """`pack_directory`'s archive as the directory `dest`, written atomically (replacing what was there)."""
    from rl2edge.fileio import atomic_directory

    with atomic_directory(dest) as staging, tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(staging, filter="data")
