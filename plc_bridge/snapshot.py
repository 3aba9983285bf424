"""The control loop's state at one instant (`ControlLoop.snapshot()`), frozen: what the metrics endpoint,
the health checks and the end-of-run summary read of the loop, and nothing else of it; and the summary
file's content made from a full one (`summary_of`).

A leaf of plc_bridge (the manifest's type and the status codes only), so that what reads snapshots
(plc_bridge.metrics) does not import the loop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.manifest import Manifest


@dataclass(frozen=True)
class UpdateState:
    """What the policy updates show of themselves (plc_bridge.policy_update)."""

    artifact: Path
    """The artifact that serves, resolved when it was loaded (never one refused)."""
    digest: str
    """The sha256 of its manifest."""
    counts: Mapping[str, int]
    """Update requests by outcome: accepted, refused, unchanged, superseded."""
    last_shadow: Mapping[str, Any]
    """The last shadow run's figures (cycles, agreement or action differences)."""
    last: Mapping[str, Any] = field(default_factory=dict)
    """The last update's record (result, artifact, manifest_sha256, reason): what a deployer that swapped
    the path waits on (the Mender update module's commit, plc_bridge.mender_module)."""


@dataclass(frozen=True)
class LatencyFigures:
    """Percentiles of a latency histogram, in ms (NaN before the first cycle)."""

    p50: float
    p99: float
    p99_9: float
    max: float
    mean: float


@dataclass(frozen=True)
class DriftState:
    """The drift monitor's figures at a snapshot (plc_bridge.drift.DriftMonitor.state)."""

    score: float | None
    """The last window's largest shift, in reference standard deviations (plc_bridge.drift); None until a
    window is full."""
    threshold: float
    per_dim: Mapping[str, float]
    """Each observation dimension's shift (key[i]), the last window's."""
    summary: Mapping[str, Any]

    @property
    def drifting(self) -> bool:
        return self.score is not None and self.score > self.threshold


@dataclass(frozen=True)
class LoopSnapshot:
    taken_at: float
    """time.monotonic() of the copy."""
    endpoint: str
    security: str
    mode: str
    period_ms: float
    deadline_ms: float
    spin_ms: float
    """The lead in use (LoopConfig.lead_ms)."""
    publishing_interval_ms: float | None
    """Subscription mode: the publishing interval the server revised to."""
    connected: bool
    progress_at: float
    """The heartbeat: time.monotonic() of the loop's last sign of progress (a cycle, a counted deadline
    miss, a connect attempt, a backoff wake-up)."""
    last_cycle_at: float | None
    last_status: CycleStatus | None
    """The status of the last completed cycle (None before the first)."""
    counts: Mapping[str, float]
    """The fields of plc_bridge.loop.Counters; `disconnected_s` with the outage under way."""
    manifest: Manifest
    """The serving policy's."""
    backend_name: str
    updates: UpdateState | None
    """None: no policy updates."""
    wall_time_s: float
    """Since the run started."""
    cpu_s: float
    """The process's CPU time since the run started."""
    latency: LatencyFigures | None = None
    """Only in a full snapshot (`ControlLoop.snapshot(full=True)`): percentiles cost a pass over the
    histogram, which the per-cycle snapshots of the metrics do not pay."""
    start_lateness: LatencyFigures | None = None
    model_process: Mapping[str, Any] | None = None
    """Full snapshots: the model process's figures (runtime.model_process), None for an in-process model."""
    update_summary: Mapping[str, Any] | None = None
    """Full snapshots with policy updates: their record (PolicyUpdates.summary)."""
    stale_after: str = ""
    """The staleness rule in force (observation_guard.StaleClock.rule)."""
    realtime: Mapping[str, Any] | None = None
    """serve's scheduler, memory lock, collector and CPUs (plc_bridge.realtime.RealtimeState)."""
    drift: DriftState | None = None
    """The observation drift monitor's last score (plc_bridge.drift); None where none runs."""
    record: Mapping[str, Any] | None = None
    """The flight recorder's counts (records, written, dropped, stopped); None where none runs."""

    @property
    def period_s(self) -> float:
        return self.period_ms / 1e3

    @property
    def deadline_s(self) -> float:
        return self.deadline_ms / 1e3


def summary_of(snap: LoopSnapshot) -> dict[str, Any]:
    """The summary JSON of a full snapshot: NaN and Inf (no cycle completed: no percentiles) as null."""
    assert snap.latency is not None and snap.start_lateness is not None, "a full snapshot"
    lat, late = snap.latency, snap.start_lateness
    cycles = snap.counts["cycles"]
    summary: dict[str, Any] = {
        "endpoint": snap.endpoint,
        "artifact": str(snap.manifest.path),
        "security": snap.security,
        "period_ms": snap.period_ms,
        "deadline_ms": snap.deadline_ms,
        "wall_time_s": snap.wall_time_s,
        **snap.counts,
        "latency_ms": {"p50": lat.p50, "p99": lat.p99, "p99.9": lat.p99_9, "max": lat.max, "mean": lat.mean},
        "start_lateness_ms": {"p50": late.p50, "p99": late.p99, "max": late.max},
        # the process's CPU time (this loop, the OPC UA client, the spin) per completed cycle
        "cpu_ms_per_cycle": snap.cpu_s * 1e3 / cycles if cycles else None,
        "spin_ms": snap.spin_ms,
        "mode": snap.mode,
        "publishing_interval_ms": snap.publishing_interval_ms,
        "stale_after": snap.stale_after,
        "realtime": None if snap.realtime is None else dict(snap.realtime),
        "model_process": None if snap.model_process is None else dict(snap.model_process),
    }
    if snap.update_summary is not None:
        summary["policy"] = dict(snap.update_summary)
    if snap.drift is not None:
        summary["drift"] = dict(snap.drift.summary)
    if snap.record is not None:
        summary["record"] = dict(snap.record)
    return _strict_json(summary)


def _strict_json(value: Any) -> Any:
    """NaN and Inf (no cycle completed: no percentiles) become null, so the summary is strict JSON."""
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
