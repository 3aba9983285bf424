"""Prometheus metrics, /healthz and /readyz of `rl2edge serve --metrics-port`.

The counters are read from the control loop at scrape time (one source of truth with the summary); the
two latency histograms are observed once per cycle. The HTTP endpoint runs on the control loop's own
event loop, between two cycles (a scrape's round trip is 1.3 ms p50 beside a 20 ms loop on the project's machine), and a
blocked loop does not answer, which is what a liveness probe must see.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.status import CycleStatus

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from rl2edge.plc_bridge.loop import ControlLoop

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

_REQUEST_LIMIT = 8192
_REQUEST_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class HealthConfig:
    periods: int = 10
    """/readyz: the last cycle completed within this many periods."""
    stall_s: float = 7.0
    """/healthz and the systemd watchdog: the loop showed progress (a cycle, a deadline miss counted, a
    connect attempt, a backoff wake-up) within this many seconds. It must exceed the longest wait that is
    not a hang: a connect attempt (5 s) plus the longest backoff (1 s)."""


class Health:
    """Liveness (the loop makes progress) and readiness (connected, the last cycle OK and recent)."""

    def __init__(self, control: ControlLoop, cfg: HealthConfig):
        self.control, self.cfg = control, cfg

    def alive(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self.control.progress_at
        if stalled > self.cfg.stall_s:
            return False, f"the control loop has shown no progress for {stalled:.1f} s"
        return True, "the control loop is running"

    def ready(self) -> tuple[bool, str]:
        c = self.control
        if not c.connected:
            return False, f"not connected to {c.bridge.endpoint}"
        if c.last_cycle_at is None or c.last_status is None:
            return False, "connected, no cycle completed yet"
        age = time.monotonic() - c.last_cycle_at
        if age > self.cfg.periods * c.cfg.period_ms / 1e3:
            return False, f"the last cycle completed {age:.2f} s ago"
        if c.last_status != CycleStatus.OK:
            return False, f"the last cycle's status was {c.last_status.name}"
        return True, "connected, the last cycle was OK"


class ServeMetrics:
    def __init__(self, control: ControlLoop, health: Health):
        from prometheus_client import CollectorRegistry, Histogram, ProcessCollector

        self.control, self.health = control, health
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram(
            "rl2edge_cycle_latency_seconds",
            "Cycle latency, from the cycle's scheduled start to its write acknowledged",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.lateness = Histogram(
            "rl2edge_cycle_start_lateness_seconds",
            "How late the timer started each cycle (part of the latency)",
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        ProcessCollector(
            registry=self.registry
        )  # process_resident_memory_bytes, cpu seconds, fds, start time
        self.registry.register(_LoopCollector(self))
        control.on_cycle = self.observe

    def observe(self, latency_ms: float, lateness_ms: float) -> None:
        self.latency.observe(latency_ms / 1e3)
        self.lateness.observe(lateness_ms / 1e3)

    # ------------------------------------------------------------------------------------- http
    async def start(self, host: str, port: int) -> asyncio.AbstractServer:
        try:
            server = await asyncio.start_server(self._handle, host, port, limit=_REQUEST_LIMIT)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"--metrics-port {port}: the port is in use on {host}; choose another port or stop what uses it"
                ) from None
            raise ConfigError(
                f"--metrics-host {host} --metrics-port {port}: cannot listen ({exc.strerror or exc})"
            ) from None
        _logger.info("metrics on http://%s:%d/metrics, health on /healthz and /readyz", host, port)
        return server

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _REQUEST_TIMEOUT_S)
            method, path = _request_line(head)
            status, content_type, body = self.respond(method, path)
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            asyncio.TimeoutError,
            ValueError,
        ):
            status, content_type, body = 400, "text/plain; charset=utf-8", b"bad request\n"
        except ConnectionError:
            writer.close()
            return
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            503: "Service Unavailable",
        }
        head_out = (
            f"HTTP/1.1 {status} {reason.get(status, '')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(head_out.encode() + (b"" if _is_head(head) else body))
            await writer.drain()
        writer.close()

    def respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(HTTP status, content type, body) of a request."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", b"only GET\n"
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path in ("/healthz", "/readyz"):
            ok, why = self.health.alive() if path == "/healthz" else self.health.ready()
            return (
                (200 if ok else 503),
                "text/plain; charset=utf-8",
                f"{'ok' if ok else 'fail'}: {why}\n".encode(),
            )
        return 404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz or /readyz\n"


def _is_head(head: bytes) -> bool:
    return head.startswith(b"HEAD ")


def _request_line(head: bytes) -> tuple[str, str]:
    parts = head.split(b"\r\n", 1)[0].decode("ascii").split(" ")
    if len(parts) != 3 or not parts[1].startswith("/"):
        raise ValueError("malformed request line")
    return parts[0], parts[1]


class _LoopCollector:
    """The control loop's counters and state, read at scrape time."""

    def __init__(self, metrics: ServeMetrics):
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        c = self.m.control
        n = c.counters
        by_status = CounterMetricFamily("rl2edge_cycles", "Completed cycles by status", labels=["status"])
        for status, field in STATUS_COUNTERS.items():
            by_status.add_metric([status.name.lower()], getattr(n, field))
        yield by_status
        for name, value, doc in (
            (
                "deadline_misses",
                n.deadline_misses,
                "Cycles past their deadline (the safe action was written)",
            ),
            ("write_rejected", n.write_rejected, "Cycles whose write the PLC refused"),
            (
                "bad_quality",
                n.bad_quality,
                "Cycles whose observation or sequence number had Bad/Uncertain quality",
            ),
            ("skipped_slots", n.skipped_slots, "Periods skipped because a cycle overran"),
            ("reconnects", n.reconnects, "Sessions re-established after a loss"),
            ("connection_losses", n.connection_losses, "Sessions lost"),
            ("disconnected_seconds", c.disconnected_s(), "Seconds without a session after a loss"),
        ):
            yield CounterMetricFamily(f"rl2edge_{name}", doc, value=value)
        yield GaugeMetricFamily(
            "rl2edge_connected", "1 while a session with the PLC is up", value=int(c.connected)
        )
        yield GaugeMetricFamily(
            "rl2edge_ready",
            "1 while connected and the last cycle was OK",
            value=int(self.m.health.ready()[0]),
        )
        age = float("nan") if c.last_cycle_at is None else time.monotonic() - c.last_cycle_at
        yield GaugeMetricFamily(
            "rl2edge_last_cycle_age_seconds", "Seconds since the last completed cycle", value=age
        )
        yield GaugeMetricFamily("rl2edge_period_seconds", "The control period", value=c.cfg.period_ms / 1e3)
        yield GaugeMetricFamily(
            "rl2edge_deadline_seconds", "The latency budget per cycle", value=c.cfg.deadline_ms / 1e3
        )
        info = InfoMetricFamily("rl2edge_artifact", "The serving artifact")
        info.add_metric([], _artifact_labels(c))
        yield info
        u = c.updater
        if u is not None:
            updates = CounterMetricFamily(
                "rl2edge_policy_updates", "Policy update requests by outcome", labels=["result"]
            )
            for result, count in u.counts.items():
                updates.add_metric([result], count)
            yield updates
            shadow = u.last_shadow
            if "agreement" in shadow:
                yield GaugeMetricFamily(
                    "rl2edge_shadow_agreement",
                    "Last shadow run: share of actions equal to the served ones",
                    value=shadow["agreement"],
                )
            if "mean_action_diff" in shadow:
                yield GaugeMetricFamily(
                    "rl2edge_shadow_action_diff",
                    "Last shadow run: mean largest |new - served| action difference, share of the action range",
                    value=shadow["mean_action_diff"],
                )


def _artifact_labels(control: ControlLoop) -> dict[str, str]:
    m = control.policy.manifest
    model = m.model["file"]
    source = m.data.get("source") or {}
    return {
        "path": os.path.realpath(m.path),
        "model": model,
        "sha256": str(m.data["files"].get(model, "")),
        "mode": str(m.quantization.get("mode", "")),
        "env_id": str(source.get("env_id", "")),
        "source_run": str(source.get("checkpoint", "")),
        "algo": str(source.get("algo", "")),
        "backend": control.policy.backend_name,
    }


def parse_metrics(text: str) -> dict[str, Any]:
    """Samples of a metrics page by name and labels: {(name, ((label, value), ...)): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[Any, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples
