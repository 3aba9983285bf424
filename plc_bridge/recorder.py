"""serve's flight recorder (`serve --record DIR`): every cycle's observation, action, status and latency, and
the policy that served it, written off the control loop into rotating segment files.

- The loop does no file I/O: `FlightRecorder.record` puts one tuple on a bounded queue without waiting (the
  queue's own lock for a moment, never the writer's I/O) and a writer thread turns it into a line. When the
  writer falls behind, the record is dropped and counted (`dropped`); no cycle waits for the recorder.
- Disk use is bounded: a segment is closed at `segment_mb` and the oldest closed segments are removed once the
  folder holds more than `max_mb`. A write that fails (a full disk, a folder removed) stops recording with one
  log line; serve keeps serving, and the summary and metrics say so (`stopped`).
- A crash does not spoil the trace: each line is one whole record, flushed to the OS at least every
  FLUSH_S (fsync'd at each flush and when a segment closes), so after SIGKILL every closed segment reads whole
  and the open one up to its last flushed line. A torn last line (no newline, or not JSON) is detected and
  skipped by the reader (runtime.trace), never misread.

Format: JSON Lines (`segment-000001.jsonl`, ...), one header line per segment (the artifact's observation keys
and sizes, the action's form, the recorder's version) then one object per cycle. Chosen over Arrow IPC or
Parquet because the device then needs nothing beyond the standard library (pyarrow is some 40 MB of wheel
on aarch64 with a numpy-2 line the edge pins cannot follow), and pandas (`read_json(path, lines=True)`),
polars and DuckDB (`read_json_auto`) open the segments as they are; `rl2edge trace export` writes Parquet or
CSV on the workstation.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rl2edge.errors import ConfigError
from rl2edge.runtime.trace import FORMAT, SEGMENT_PREFIX, segment_index

_logger = logging.getLogger(__name__)

FLUSH_S = 0.5
"""At most this long between a record's queueing and its line reaching the OS (and the disk: fsync)."""


@dataclass(frozen=True)
class RecordConfig:
    folder: Path
    max_mb: float = 512.0
    """The folder's size bound: the oldest closed segments are removed past it."""
    segment_mb: float = 16.0
    """A segment is closed, and the next one opened, at this size."""
    queue_size: int = 8192
    """Records waiting for the writer; past it, records are dropped and counted (some 160 s at 20 ms)."""

    def check(self) -> None:
        if not (math.isfinite(self.max_mb) and self.max_mb > 0):
            raise ConfigError(f"--record-max-mb must be a positive number of MB, got {self.max_mb}")
        if not (math.isfinite(self.segment_mb) and 0 < self.segment_mb):
            raise ConfigError(
                f"the record segment size must be a positive number of MB, got {self.segment_mb}"
            )
        if self.segment_mb * 2 > self.max_mb:
            raise ConfigError(
                f"--record-max-mb {self.max_mb:g} holds fewer than two segments of {self.segment_mb:g} MB: "
                f"give at least {self.segment_mb * 2:g}"
            )
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(
                f"--record {self.folder}: exists and is not a folder; name a folder for the trace"
            )


def _values(x: Any) -> list[float | None]:
    """A flat list of floats; NaN and infinities as null (JSON has no such numbers; the status says why)."""
    out: list[float | None] = []
    for v in x if isinstance(x, (list, tuple)) else list(x):
        f = float(v)
        out.append(f if math.isfinite(f) else None)
    return out


class FlightRecorder:
    """One per serve run. `record(...)` from the loop's thread; everything else in the writer thread."""

    def __init__(self, cfg: RecordConfig, header: dict[str, Any]):
        cfg.check()
        cfg.folder.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        self.header = {"format": FORMAT, **header}
        self.records = 0
        """Records handed to `record` (the loop's side)."""
        self.dropped = 0
        """Of those, dropped because the writer was behind or recording had stopped."""
        self.written = 0
        self.unwritten = 0
        """Queued records the writer could not write once recording had stopped (the writer's own count)."""
        self.segments_removed = 0
        self.stopped = ""
        """Why recording stopped early ("": it did not)."""
        self._queue: queue.Queue[tuple[Any, ...] | None] = queue.Queue(cfg.queue_size)
        self._file: TextIO | None = None
        self._size = 0
        self._index = max((segment_index(p) for p in cfg.folder.glob(f"{SEGMENT_PREFIX}*.jsonl")), default=0)
        self._thread = threading.Thread(target=self._write_loop, name="rl2edge-recorder", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------------------- the loop's side
    def record(self, *fields: Any) -> None:
        """One cycle: (wall time, cycle, sequence, episode start, observation, action, status name, status
        code, latency ms, policy sha256, predicted, state reset). Never blocks."""
        self.records += 1
        if self.stopped:
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(fields)
        except queue.Full:
            self.dropped += 1

    def stats(self) -> dict[str, Any]:
        return {
            "folder": str(self.cfg.folder),
            "records": self.records,
            "written": self.written,
            "dropped": self.dropped + self.unwritten,
            "segments_removed": self.segments_removed,
            "stopped": self.stopped,
        }

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, close the segment (fsync'd), stop the writer."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    # ---------------------------------------------------------------------------- the writer thread
    def _write_loop(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=FLUSH_S)
            except queue.Empty:
                item = ()
            try:
                if item is None:
                    self._close_segment()
                    return
                if item and not self.stopped:
                    self._write(item)
                if self._file is not None and time.monotonic() - last_flush >= FLUSH_S:
                    self._flush()
                    last_flush = time.monotonic()
            except OSError as exc:
                if item:  # the record whose write failed is lost too
                    self.unwritten += 1
                self._stop(f"{type(exc).__name__}: {exc}")

    def _write(self, f: tuple[Any, ...]) -> None:
        line = json.dumps(
            {
                "t": f[0],
                "cycle": f[1],
                "seq": f[2] if isinstance(f[2], (int, float, str)) or f[2] is None else str(f[2]),
                "episode_start": f[3],
                "obs": None if f[4] is None else _values(f[4]),
                "action": _values(f[5]),
                "status": f[6],
                "code": f[7],
                "latency_ms": round(f[8], 4),
                "policy": f[9],
                "predicted": f[10],
                "reset": f[11],
            },
            separators=(",", ":"),
        )
        if self._file is None or self._size >= self.cfg.segment_mb * 1e6:
            self._rotate()
        assert self._file is not None
        self._file.write(line + "\n")
        self._size += len(line) + 1
        self.written += 1

    def _rotate(self) -> None:
        self._close_segment()
        self._index += 1
        path = self.cfg.folder / f"{SEGMENT_PREFIX}{self._index:06d}.jsonl"
        self._file = path.open("x", encoding="utf-8")
        header = json.dumps({"kind": "header", "opened": time.time(), **self.header}, separators=(",", ":"))
        self._file.write(header + "\n")
        self._size = len(header) + 1
        self._prune()

    def _flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def _close_segment(self) -> None:
        if self._file is not None:
            try:
                self._flush()
            finally:
                self._file.close()
                self._file = None

    def _prune(self) -> None:
        """The oldest closed segments removed until the folder is within max_mb (the open one never)."""
        segments = sorted(self.cfg.folder.glob(f"{SEGMENT_PREFIX}*.jsonl"), key=segment_index)
        sizes = [p.stat().st_size for p in segments]
        total = sum(sizes) + self.cfg.segment_mb * 1e6  # room for the segment just opened to fill
        for path, size in zip(segments[:-1], sizes[:-1], strict=True):
            if total <= self.cfg.max_mb * 1e6:
                break
            path.unlink()
            total -= size
            self.segments_removed += 1

    def _stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = why
            _logger.error("recording stopped (%s); serve goes on without a trace in %s", why, self.cfg.folder)
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        while True:  # what is queued cannot be written: counted as dropped
            try:
                if self._queue.get_nowait() is None:
                    self._queue.put_nowait(None)
                    return
                self.unwritten += 1
            except queue.Empty:
                return
