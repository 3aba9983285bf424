"""The trace contract: what serve's flight recorder (plc_bridge.recorder) writes and everything else reads
(`rl2edge trace`, `rl2edge replay`, `export --observations TRACE`), like the manifest is the artifact's.

A trace is a folder of JSON Lines segments (`segment-000001.jsonl`, ...), each opening with one header line
(`{"kind": "header", "format": FORMAT, "observation": ..., "action": ..., ...}`) and then one object per
cycle. Reading takes the segments in order, each line one record; a torn line (a crash mid-write: no
newline, or not a whole JSON object) is skipped and counted, never misread. Numpy and the standard library
only: it runs on the device as on the workstation.

`Trace.episodes()` gives what replay needs: the cycles whose observation the policy was called on, in order,
with where its state started afresh (serve's resets and the PLC's episode starts).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ObservationSpec

FORMAT = "rl2edge-trace/1"
SEGMENT_PREFIX = "segment-"
MAX_LINE_BYTES = 16 * 1024 * 1024
"""A record longer than this is not one serve wrote (a camera frame of 2 MP as JSON is some 10 MB)."""


@dataclass
class Trace:
    folder: Path
    header: dict[str, Any]
    """The first segment's header: the observation and action specs, the policy serving when it opened."""
    records: list[dict[str, Any]] = field(default_factory=list)
    segments: int = 0
    torn: int = 0
    """Lines skipped: a torn tail (a crash mid-write) or a line that is not a record."""

    @property
    def observation(self) -> ObservationSpec:
        return ObservationSpec.from_json(self.header["observation"])

    @property
    def observation_keys(self) -> list[tuple[str, int]]:
        """(name, size) of each key of the flat observation, in the artifact's order (one 'obs' key for a Box)."""
        spec = self.observation
        return [(k.name, k.size) for k in spec.keys] if spec.keys else [("obs", spec.size)]

    def observations(self) -> tuple[np.ndarray, np.ndarray]:
        """(the valid observations as float32 rows, their record indices): cycles whose observation was read
        whole and finite (an INVALID cycle's NaN is null in the file)."""
        rows, index = [], []
        for i, r in enumerate(self.records):
            obs = r.get("obs")
            if obs is not None and None not in obs:
                rows.append(obs)
                index.append(i)
        width = sum(size for _, size in self.observation_keys)
        if not rows:
            return np.zeros((0, width), np.float32), np.zeros(0, int)
        return np.asarray(rows, np.float32), np.asarray(index)

    def predicted(self) -> list[int]:
        """The indices of the records whose observation the serving policy was called on, in order."""
        return [i for i, r in enumerate(self.records) if r.get("predicted")]

    def summary(self) -> dict[str, Any]:
        recs = self.records
        lat = np.asarray([r["latency_ms"] for r in recs], float) if recs else np.zeros(0)
        policies = Counter(str(r.get("policy")) for r in recs)
        return {
            "folder": str(self.folder),
            "segments": self.segments,
            "cycles": len(recs),
            "torn_lines": self.torn,
            "from": recs[0]["t"] if recs else None,
            "to": recs[-1]["t"] if recs else None,
            "episodes": sum(bool(r.get("episode_start")) for r in recs),
            "state_resets": sum(bool(r.get("reset")) for r in recs),
            "statuses": dict(Counter(str(r.get("status")) for r in recs)),
            "latency_ms": {
                q: float(np.percentile(lat, p)) if lat.size else None
                for q, p in (("p50", 50), ("p99", 99), ("max", 100))
            },
            "policies": dict(policies),
        }


def segment_index(path: Path) -> int:
    """The number in a segment's name (0 for a name that has none)."""
    try:
        return int(path.stem.removeprefix(SEGMENT_PREFIX))
    except ValueError:
        return 0


def is_trace(path: str | Path) -> bool:
    """A folder holding trace segments."""
    p = Path(path)
    return p.is_dir() and any(p.glob(f"{SEGMENT_PREFIX}*.jsonl"))


def read_trace(folder: str | Path) -> Trace:
    """Every segment of `folder` in order. ConfigError (one line) where there is no trace to read."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"trace {path}: not a folder; give the folder serve --record wrote")
    segments = sorted(path.glob(f"{SEGMENT_PREFIX}*.jsonl"), key=segment_index)
    if not segments:
        raise ConfigError(
            f"trace {path}: no {SEGMENT_PREFIX}*.jsonl segment in it (is it serve's --record folder?)"
        )
    trace: Trace | None = None
    for seg in segments:
        header, records, torn = _read_segment(seg)
        if header is None:  # a segment cut before its header was flushed: nothing of it can be read
            torn += len(records)
            records = []
        if trace is None:
            if header is None:
                continue
            trace = Trace(path, header)
        elif header is not None and (header["observation"], header["action"]) != (
            trace.header["observation"],
            trace.header["action"],
        ):
            raise ConfigError(
                f"trace {path}: {seg.name} was recorded for another observation or action layout than the "
                "segments before it (serve ran another artifact into the same folder); give each its own folder"
            )
        trace.records.extend(records)
        trace.torn += torn
        trace.segments += 1
    if trace is None:
        raise ConfigError(f"trace {path}: no segment with a readable header; it is not a trace serve wrote")
    return trace


def _read_segment(seg: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
    header: dict[str, Any] | None = None
    records: list[dict[str, Any]] = []
    torn = 0
    with seg.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n") or len(raw) > MAX_LINE_BYTES:  # the torn tail of a crash
                torn += 1
                continue
            try:
                item = json.loads(raw)
            except ValueError:
                torn += 1
                continue
            if not isinstance(item, dict):
                torn += 1
            elif item.get("kind") == "header":
                if item.get("format") != FORMAT:
                    raise ConfigError(
                        f"trace segment {seg}: format {item.get('format')!r}, this rl2edge reads {FORMAT!r}"
                    )
                if not isinstance(item.get("observation"), dict) or not isinstance(item.get("action"), dict):
                    raise ConfigError(f"trace segment {seg}: its header names no observation or action spec")
                header = header or item
            elif "cycle" in item and "action" in item:
                records.append(item)
            else:
                torn += 1
    return header, records, torn
