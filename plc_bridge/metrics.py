"""Prometheus metrics, /healthz and /readyz of `rl2edge serve --metrics-port`.

Two threads, one reference between them:
- the control loop's thread publishes a `Snapshot` (the loop's own frozen `ControlLoop.snapshot()`, the
  serving artifact's labels and the latency histograms) after every cycle (the loop's hooks,
  plc_bridge.service) and every PUBLISH_INTERVAL_S from a task on its event loop, so that a loop that is
  reconnecting or waiting out a backoff is followed too; publishing is one assignment of a new object
  (`SnapshotPublisher.snapshot`);
- the HTTP server (plc_bridge.metrics_http) runs on its own event loop in its own thread, with a cap on
  connections and limits on each request, and reads nothing but the latest snapshot: a scrape, a flood
  or a slow client never runs code on the control loop's event loop.
/healthz tells whether the loop shows progress: its heartbeat (`LoopSnapshot.progress_at`, the time of the
last completed cycle, counted deadline miss, connect attempt or backoff wake-up) as last published. A
blocked event loop publishes nothing, so its heartbeat ages and /healthz answers 503.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.metrics_http import HttpLimits, HttpPort, Response
from rl2edge.plc_bridge.snapshot import LoopSnapshot
from rl2edge.plc_bridge.status import CycleStatus

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

_logger = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
"""Around the 50 ms budget: fine below it, coarse past it."""

STATUS_COUNTERS = {
    CycleStatus.OK: "ok",
    CycleStatus.INVALID_OBSERVATION: "invalid",
    CycleStatus.STALE: "stale",
    CycleStatus.DEADLINE_MISS: "deadline_misses",
    CycleStatus.INFERENCE_ERROR: "inference_errors",
    CycleStatus.WRITE_REJECTED: "write_rejected",
}
"""Every cycle has exactly one of these statuses: their counts add up to `cycles`."""

PUBLISH_INTERVAL_S = 0.1
"""A snapshot at least this often while the event loop runs, cycles or not."""
PAGE_MAX_AGE_S = 0.25
"""/metrics renders a page once per snapshot, and again once it is this old (the process figures and the
ages in it move); a flood of scrapes between two snapshots gets the same bytes."""


@dataclass(frozen=True)
class HealthConfig:
    periods: int = 10
    """/readyz: the last cycle completed within this many periods."""
    stall_s: float = 7.0
    """/healthz and the systemd watchdog: the loop showed progress (a cycle, a deadline miss counted, a
    connect attempt, a backoff wake-up) within this many seconds. It must exceed the longest wait that is
    not a hang: a connect attempt (5 s) plus the longest backoff (1 s)."""


class Histogram(NamedTuple):
    """Counts per bucket of LATENCY_BUCKETS_S (not cumulative; the last: above the top bound), their sum."""

    counts: tuple[int, ...]
    sum: float


class Snapshot(NamedTuple):
    """What a page shows, copied on the loop's thread; never changed once published."""

    loop: LoopSnapshot
    """The loop's own snapshot (counts, state, heartbeat, serving artifact, policy updates)."""
    artifact: Mapping[str, str]
    """The labels of `rl2edge_artifact_info`: the artifact serving."""
    latency: Histogram
    lateness: Histogram


class SnapshotPublisher:
    """Runs on the control loop's thread: the latency histograms and the snapshots."""

    def __init__(self, take: Callable[[], LoopSnapshot]):
        """`take`: the loop's snapshot (ControlLoop.snapshot)."""
        self._take = take
        self._latency = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self._lateness = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self._latency_sum = self._lateness_sum = 0.0
        self._labels_key: tuple[Any, ...] = ()
        self._labels: Mapping[str, str] = MappingProxyType({})
        self._failed = False
        self.snapshot: Snapshot = self.take()
        """The latest snapshot: the only thing other threads read."""

    def observe(self, latency_ms: float, lateness_ms: float) -> None:
        """After each cycle (from the loop's hooks): its latencies, then a snapshot."""
        latency_s, lateness_s = latency_ms / 1e3, lateness_ms / 1e3
        self._latency[bisect.bisect_left(LATENCY_BUCKETS_S, latency_s)] += 1
        self._lateness[bisect.bisect_left(LATENCY_BUCKETS_S, lateness_s)] += 1
        self._latency_sum += latency_s
        self._lateness_sum += lateness_s
        self.publish()

    def publish(self) -> None:
        """A new snapshot; a failure to make one is logged (once) and never the control loop's."""
        try:
            self.snapshot = self.take()
        except Exception as exc:
            if not self._failed:
                self._failed = True
                _logger.exception(
                    "metrics: cannot snapshot the control loop (%s: %s); /metrics shows the last one",
                    type(exc).__name__,
                    exc,
                )

    async def run(self, interval_s: float = PUBLISH_INTERVAL_S) -> None:
        """Publish every `interval_s` until cancelled: what changes between cycles (a lost session, an
        outage's length, a connect attempt's heartbeat) reaches the page within it."""
        while True:
            self.publish()
            await asyncio.sleep(interval_s)

    def take(self) -> Snapshot:
        loop = self._take()
        return Snapshot(
            loop=loop,
            artifact=self._artifact_labels(loop),
            latency=Histogram(tuple(self._latency), self._latency_sum),
            lateness=Histogram(tuple(self._lateness), self._lateness_sum),
        )

    def _artifact_labels(self, loop: LoopSnapshot) -> Mapping[str, str]:
        """The serving artifact's labels, made again only when the serving manifest or the updates' serving
        artifact changes. The path is the one resolved when that artifact was loaded (the updates'
        `artifact`), never the configured path resolved now: a deployer's symlink may point at an update
        that was refused."""
        u = loop.updates
        key = (loop.manifest, None if u is None else u.artifact, None if u is None else u.digest)
        if len(self._labels_key) == 3 and all(a is b for a, b in zip(key, self._labels_key, strict=True)):
            return self._labels
        m = loop.manifest
        if u is not None:
            path, digest = str(u.artifact), str(u.digest or "")
        else:  # no updates: the policy loaded at start serves throughout; resolved once, at first sight
            path, digest = os.path.realpath(m.path), ""
        model = m.model["file"]
        source = m.data.get("source") or {}
        self._labels_key = key
        self._labels = MappingProxyType(
            {
                "path": path,
                "manifest_sha256": digest,
                "model": model,
                "sha256": str(m.data["files"].get(model, "")),
                "mode": str(m.quantization.get("mode", "")),
                "env_id": str(source.get("env_id", "")),
                "source_run": str(source.get("checkpoint", "")),
                "algo": str(source.get("algo", "")),
                "backend": loop.backend_name,
            }
        )
        return self._labels


class Health:
    """Liveness (the loop makes progress) and readiness (connected, the last cycle OK and recent): from a
    published snapshot (the HTTP thread) or, given none, from one taken now (on the loop's own thread:
    systemd's watchdog)."""

    def __init__(self, take: Callable[[], LoopSnapshot], cfg: HealthConfig):
        """`take`: the loop's snapshot (ControlLoop.snapshot)."""
        self._take, self.cfg = take, cfg

    def alive(self, snap: LoopSnapshot | None = None) -> tuple[bool, str]:
        snap = self._take() if snap is None else snap
        stalled = time.monotonic() - snap.progress_at
        if stalled > self.cfg.stall_s:
            return False, f"the control loop has shown no progress for {stalled:.1f} s"
        return True, "the control loop is running"

    def ready(self, snap: LoopSnapshot | None = None) -> tuple[bool, str]:
        snap = self._take() if snap is None else snap
        if not snap.connected:
            return False, f"not connected to {snap.endpoint}"
        if snap.last_cycle_at is None or snap.last_status is None:
            return False, "connected, no cycle completed yet"
        age = time.monotonic() - snap.last_cycle_at
        if age > self.cfg.periods * snap.period_s:
            return False, f"the last cycle completed {age:.2f} s ago"
        if snap.last_status != CycleStatus.OK:
            return False, f"the last cycle's status was {snap.last_status.name}"
        drift = snap.drift
        if drift is not None and drift.drifting:  # a warning, not a stop: the loop serves on
            return True, (
                f"connected, the last cycle was OK; observation drift {drift.score:.2f} past {drift.threshold:g} "
                "reference standard deviations (a warning)"
            )
        return True, "connected, the last cycle was OK"


class MetricsServer:
    """What `ServeMetrics.start` returns: the running endpoint, stopped by `close` and `wait_closed`."""

    def __init__(self, http: HttpPort, publishing: asyncio.Future | None):
        self.http, self._publishing = http, publishing

    @property
    def address(self) -> tuple[str, int]:
        assert self.http.address is not None
        return self.http.address

    def close(self) -> None:
        if self._publishing is not None:
            self._publishing.cancel()
        self.http.close(timeout_s=0)  # asks the thread to stop; wait_closed waits for it

    async def wait_closed(self) -> None:
        if self._publishing is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._publishing
        await asyncio.to_thread(self.http.close)


class ServeMetrics:
    def __init__(self, take: Callable[[], LoopSnapshot], health: Health, limits: HttpLimits | None = None):
        """`take`: the loop's snapshot (ControlLoop.snapshot); `publisher.observe` is to be called after
        each cycle (ServeService does, from the loop's hooks)."""
        from prometheus_client import CONTENT_TYPE_LATEST, ProcessCollector, generate_latest

        self.health = health
        self.publisher = SnapshotPublisher(take)
        self.http = HttpPort(self.respond, limits or HttpLimits())
        self._process = ProcessCollector(registry=None)  # process_resident_memory_bytes, cpu seconds, fds
        self._generate, self._content_type = generate_latest, CONTENT_TYPE_LATEST
        self._page: tuple[Snapshot | None, float, bytes] = (None, 0.0, b"")
        """The last page rendered (HTTP thread only): its snapshot, when, the bytes."""

    # -------------------------------------------------------------------- the control loop's thread
    async def start(self, host: str, port: int) -> MetricsServer:
        """Serve on (host, port) from a thread of its own, and publish snapshots on the running loop."""
        self.publisher.publish()
        try:
            bound = self.http.start(host, port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"--metrics-port {port}: the port is in use on {host}; choose another port or stop what uses it"
                ) from None
            raise ConfigError(
                f"--metrics-host {host} --metrics-port {port}: cannot listen ({exc.strerror or exc})"
            ) from None
        publishing = asyncio.ensure_future(self.publisher.run())
        _logger.info("metrics on http://%s:%d/metrics, health on /healthz and /readyz", host, bound[1])
        return MetricsServer(self.http, publishing)

    # ----------------------------------------------------------------------------- the HTTP thread
    def respond(self, method: str, path: str) -> Response:
        """(HTTP status, content type, body) of a request, from the latest snapshot."""
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"only GET and HEAD\n"
        path = path.split("?", 1)[0]
        snap = self.publisher.snapshot
        if path == "/metrics":
            return 200, self._content_type, self.page(snap)
        if path in ("/healthz", "/readyz"):
            ok, why = self.health.alive(snap.loop) if path == "/healthz" else self.health.ready(snap.loop)
            return (
                (200 if ok else 503),
                "text/plain; charset=utf-8",
                f"{'ok' if ok else 'fail'}: {why}\n".encode(),
            )
        return 404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n"

    def page(self, snap: Snapshot) -> bytes:
        shown, at, body = self._page
        now = time.monotonic()
        if shown is snap and now - at < PAGE_MAX_AGE_S:
            return body
        body = self._generate(_Families([*self._process.collect(), *self._families(snap, now)]))
        self._page = (snap, now, body)
        return body

    def _families(self, s: Snapshot, now: float) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
            InfoMetricFamily,
        )
        from prometheus_client.utils import floatToGoString

        for name, doc, h in (
            (
                "rl2edge_cycle_latency_seconds",
                "Cycle latency, from the cycle's scheduled start to its write acknowledged",
                s.latency,
            ),
            (
                "rl2edge_cycle_start_lateness_seconds",
                "How late the timer started each cycle (part of the latency)",
                s.lateness,
            ),
        ):
            total, buckets = 0, []
            for bound, count in zip((*LATENCY_BUCKETS_S, float("inf")), h.counts, strict=True):
                total += count
                buckets.append((floatToGoString(bound), total))
            yield HistogramMetricFamily(name, doc, buckets=buckets, sum_value=h.sum)
        n = s.loop.counts
        by_status = CounterMetricFamily("rl2edge_cycles", "Completed cycles by status", labels=["status"])
        for status, field in STATUS_COUNTERS.items():
            by_status.add_metric([status.name.lower()], n[field])
        yield by_status
        record = s.loop.record
        if record is not None:
            yield CounterMetricFamily(
                "rl2edge_record_written",
                "Cycles the flight recorder wrote to its trace",
                value=record["written"],
            )
            yield CounterMetricFamily(
                "rl2edge_record_dropped",
                "Cycles the flight recorder dropped (its writer behind, or recording stopped)",
                value=record["dropped"],
            )
            yield GaugeMetricFamily(
                "rl2edge_record_stopped",
                "1 once recording stopped (a full disk, say); serve goes on",
                value=int(bool(record["stopped"])),
            )
        drift = s.loop.drift
        if drift is not None and drift.score is not None:
            per_dim = GaugeMetricFamily(
                "rl2edge_observation_drift",
                "Shift of the last window's mean from the reference mean, in reference standard deviations",
                labels=["key", "dim"],
            )
            for name, value in drift.per_dim.items():
                key, _, dim = name.rstrip("]").partition("[")
                per_dim.add_metric([key, dim], value)
            yield per_dim
            yield GaugeMetricFamily(
                "rl2edge_observation_drift_score", "The largest shift over the dimensions", value=drift.score
            )
            yield GaugeMetricFamily(
                "rl2edge_observation_drift_threshold",
                "The score past which drift is reported",
                value=drift.threshold,
            )
        for name, doc in (
            (
                "deadline_misses",
                "Cycles past their deadline (answered as the node map's fault_response says)",
            ),
            ("held", "Fault cycles that repeated the last action (fault_response: hold)"),
            (
                "ramped",
                "Fault cycles that wrote a step of the ramp toward the safe action (fault_response: ramp)",
            ),
            ("write_rejected", "Cycles whose write the PLC refused"),
            ("bad_quality", "Cycles whose observation or sequence number had Bad/Uncertain quality"),
            ("skipped_slots", "Periods skipped because a cycle overran"),
            ("reconnects", "Sessions re-established after a loss"),
            ("connection_losses", "Sessions lost"),
            ("disconnected_s", "Seconds without a session after a loss"),
            ("state_resets", "A stateful policy's state resets by serve's rules (connect, after STALE)"),
        ):
            metric = "disconnected_seconds" if name == "disconnected_s" else name
            yield CounterMetricFamily(f"rl2edge_{metric}", doc, value=n[name])
        yield GaugeMetricFamily(
            "rl2edge_connected", "1 while a session with the PLC is up", value=int(s.loop.connected)
        )
        yield GaugeMetricFamily(
            "rl2edge_ready",
            "1 while connected and the last cycle was OK",
            value=int(self.health.ready(s.loop)[0]),
        )
        age = float("nan") if s.loop.last_cycle_at is None else now - s.loop.last_cycle_at
        yield GaugeMetricFamily(
            "rl2edge_last_cycle_age_seconds", "Seconds since the last completed cycle", value=age
        )
        yield GaugeMetricFamily("rl2edge_period_seconds", "The control period", value=s.loop.period_s)
        yield GaugeMetricFamily(
            "rl2edge_deadline_seconds", "The latency budget per cycle", value=s.loop.deadline_s
        )
        info = InfoMetricFamily("rl2edge_artifact", "The serving artifact")
        info.add_metric([], s.artifact)
        yield info
        u = s.loop.updates
        if u is not None:
            updates = CounterMetricFamily(
                "rl2edge_policy_updates", "Policy update requests by outcome", labels=["result"]
            )
            for result, count in u.counts.items():
                updates.add_metric([result], count)
            yield updates
            if u.last:
                last = InfoMetricFamily(
                    "rl2edge_policy_update_last",
                    "The last policy update: its result, artifact, manifest sha256 and the reason of a refusal",
                )
                last.add_metric(
                    [],
                    {k: _label(u.last.get(k)) for k in ("result", "artifact", "manifest_sha256", "reason")},
                )
                yield last
            if "agreement" in u.last_shadow:
                yield GaugeMetricFamily(
                    "rl2edge_shadow_agreement",
                    "Last shadow run: share of actions equal to the served ones",
                    value=u.last_shadow["agreement"],
                )
            if "mean_action_diff" in u.last_shadow:
                yield GaugeMetricFamily(
                    "rl2edge_shadow_action_diff",
                    "Last shadow run: mean largest |new - served| action difference, share of the action range",
                    value=u.last_shadow["mean_action_diff"],
                )
        refused = CounterMetricFamily(
            "rl2edge_metrics_refused",
            "Clients of this endpoint refused, by reason (busy: over the connection cap; timeout; too_large; "
            "malformed; incomplete)",
            labels=["reason"],
        )
        for reason, count in self.http.refused.items():
            refused.add_metric([reason], count)
        yield refused


def _label(value: Any) -> str:
    """A label value: the text, one line, at most 500 characters (a refusal's reason can quote a path)."""
    text = "" if value is None else " ".join(str(value).split())
    return text if len(text) <= 500 else text[:497] + "..."


class _Families:
    """What generate_latest needs of a registry: the families to write."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def parse_metrics(text: str) -> dict[Any, float]:
    """Samples of a metrics page by name and labels: {(name, ((label, value), ...)): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[Any, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples
