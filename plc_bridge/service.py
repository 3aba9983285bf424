"""`rl2edge serve` as a plant service: the control loop with what runs beside it (on its event loop, but
the metrics endpoint, which has a thread of its own and reads the loop's published snapshots).

- policy updates (`--watch`, SIGHUP): plc_bridge.policy_update;
- Prometheus metrics, /healthz, /readyz (`--metrics-port`): plc_bridge.metrics;
- systemd's readiness and watchdog notifications when started by a `Type=notify` unit;
- the summary file rewritten atomically at every stats interval, by a worker thread (an fsync on the
  device's eMMC can take milliseconds that belong to the control loop);
- the flight recorder (`--record`): every cycle handed to plc_bridge.recorder's writer thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl2edge.fileio import write_json_atomic
from rl2edge.plc_bridge.binding import PlantIo
from rl2edge.plc_bridge.client import BridgeConfig, PlcClient
from rl2edge.plc_bridge.drift import DriftMonitor
from rl2edge.plc_bridge.drift_config import DriftConfig
from rl2edge.plc_bridge.hooks import CycleOutcome
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.metrics import Health, HealthConfig, ServeMetrics
from rl2edge.plc_bridge.observation_guard import Serving, prepare_serving
from rl2edge.plc_bridge.policy_update import PolicyUpdates, UpdateConfig
from rl2edge.plc_bridge.recorder import FlightRecorder, RecordConfig
from rl2edge.plc_bridge.snapshot import DriftState, UpdateState
from rl2edge.plc_bridge.systemd_notify import SystemdNotifier
from rl2edge.runtime.policy import Policy

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceConfig:
    updates: UpdateConfig
    health: HealthConfig
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    summary: Path | None = None
    record: RecordConfig | None = None
    drift: DriftConfig | None = None
    """The observation drift monitor (plc_bridge.drift); None: off."""


class ServeService:
    """The control loop and what runs beside it; the loop's hooks (plc_bridge.hooks.LoopHooks): the policy
    updates, the metrics' latency histograms and snapshots, the summary file."""

    def __init__(
        self,
        policy: Policy,
        bridge: BridgeConfig,
        loop_cfg: LoopConfig,
        cfg: ServiceConfig,
        client_factory: Callable[[BridgeConfig, PlantIo], PlcClient] = PlcClient,
    ):
        self.cfg = cfg
        self.metrics: ServeMetrics | None = None
        self.control = ControlLoop(policy, bridge, loop_cfg, hooks=self, client_factory=client_factory)
        self.updates = PolicyUpdates(
            policy, cfg.updates, functools.partial(prepare_serving, node_map=bridge.node_map)
        )
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="rl2edge-summary") if cfg.summary else None
        # before the metrics: their first snapshot reads the drift monitor
        self.drift = DriftMonitor(policy.manifest, cfg.drift) if cfg.drift is not None else None
        self.recorder = (
            FlightRecorder(
                cfg.record,
                {
                    **trace_header(policy, self.updates.serving_digest),
                    "period_ms": loop_cfg.period_ms,
                    "deadline_ms": loop_cfg.deadline_ms,
                },
            )
            if cfg.record is not None
            else None
        )
        self.health = Health(self.control.snapshot, cfg.health)
        if cfg.metrics_port is not None:
            self.metrics = ServeMetrics(self.control.snapshot, self.health)

    # ------------------------------------------------------------------------ the loop's hooks
    def before_cycle(self, cycles: int) -> Serving | None:
        serving = self.updates.before_cycle(cycles)
        if serving is not None and self.cfg.drift is not None:  # the new policy's own data is the reference
            self.drift = DriftMonitor(serving.policy.manifest, self.cfg.drift)
        return serving

    def after_cycle(self, outcome: CycleOutcome) -> None:
        self.updates.after_cycle(outcome)
        if self.metrics is not None:
            self.metrics.publisher.observe(outcome.latency_ms, outcome.lateness_ms)
        if self.drift is not None and outcome.observation is not None:
            self.drift.observe(outcome.observation)
        if self.recorder is not None:
            o = outcome
            self.recorder.record(
                time.time(),
                o.cycles,
                o.sequence,
                o.episode_start,
                o.observation,
                o.action,
                o.status.name,
                int(o.status),
                o.latency_ms,
                self.updates.serving_digest[:16],
                o.predicted,
                o.state_reset,
            )

    def on_stats(self, summary: dict[str, Any]) -> None:
        """The summary file rewritten, by the writer thread."""
        if self._writer is None or self.cfg.summary is None:
            return
        future = self._writer.submit(write_json_atomic, self.cfg.summary, summary)
        future.add_done_callback(_log_failure)

    def update_state(self) -> UpdateState:
        return self.updates.state()

    def update_summary(self) -> dict[str, Any]:
        return self.updates.summary()

    def drift_state(self) -> DriftState | None:
        return self.drift.state() if self.drift is not None else None

    def record_state(self) -> dict[str, Any] | None:
        return self.recorder.stats() if self.recorder is not None else None

    async def run(self, stop: asyncio.Event) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        port = self.cfg.metrics_port
        server = (
            await self.metrics.start(self.cfg.metrics_host, port)
            if self.metrics is not None and port is not None
            else None
        )
        notifier = SystemdNotifier.from_environment()
        loop.add_signal_handler(signal.SIGHUP, self.updates.request, "SIGHUP")
        # serve's main() blocked SIGHUP before anything else (rl2edge.cli): a reload requested while serve
        # was starting is pending, and is delivered here, to the handler, as a queued update request.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        helpers = [asyncio.ensure_future(self.updates.run(stop))]
        if notifier is not None:
            helpers.append(asyncio.ensure_future(notifier.pet_while(lambda: self.health.alive()[0], stop)))
            if notifier.watchdog_s is not None and notifier.watchdog_s < self.cfg.health.stall_s:
                _logger.warning(
                    "WatchdogSec=%gs is shorter than the longest wait that is not a hang (%g s: a connect attempt "
                    "and a backoff); systemd may restart serve while it reconnects. Use WatchdogSec=%ds or more.",
                    notifier.watchdog_s,
                    self.cfg.health.stall_s,
                    int(self.cfg.health.stall_s) + 3,
                )
            notifier.notify("READY=1", f"STATUS=serving {self.control.policy.manifest.path}")
        try:
            summary = await self.control.run(stop)
        finally:
            stop.set()
            if notifier is not None:
                notifier.notify("STOPPING=1")
            for task in helpers:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # stopping: a reload is moot, not fatal
            loop.remove_signal_handler(signal.SIGHUP)
            if server is not None:
                server.close()
                await server.wait_closed()
            if self._writer is not None:
                self._writer.shutdown(wait=True)  # the final summary must not race a periodic one
            if self.recorder is not None:
                self.recorder.close()
            if notifier is not None:
                notifier.close()
        if (
            self.recorder is not None
        ):  # the counts once the writer has finished, not as the loop last saw them
            summary["record"] = self.recorder.stats()
        return summary

    def close(self) -> None:
        """Stop every model process: the serving policy's and any candidate's."""
        self.updates.close()
        self.control.policy.close()


def trace_header(policy: Policy, digest: str) -> dict[str, Any]:
    """What a trace's reader needs beside the records: the observation's keys and sizes (the records hold
    their concatenation), the action's form, the training statistics drift is measured against, and the
    policy serving when recording began."""
    m = policy.manifest
    return {
        "observation": m.data["observation"],
        "action": m.data["action"],
        # what the drift of the recorded observations is measured against (plc_bridge.drift)
        "folded": {"normalization": (m.data.get("folded") or {}).get("normalization")},
        "observation_stats": m.data.get("observation_stats"),
        "policy": {"manifest_sha256": digest, "artifact": str(m.path)},
    }


def _log_failure(future: Any) -> None:
    exc = future.exception()
    if exc is not None:
        _logger.warning("cannot rewrite the summary file: %s", exc)
