"""The deadline-aware control loop of `rl2edge serve`.

Each period: one batched Read (observation + the PLC's sequence number), validate, infer, one batched
Write (action + the sequence number it answers + heartbeat + status). Latency is measured from the
cycle's scheduled start, so a late cycle counts as late. Invalid or stale input, a deadline miss or an
inference error gets the safe action and a status code, is logged and counted, and the loop keeps
running; a lost connection is retried with exponential backoff. On stop it writes the safe action.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from plc_bridge.client import BridgeConfig, PlcClient
from plc_bridge.latency import LatencyHistogram
from plc_bridge.status import CycleStatus
from rl2edge.errors import BackendError, ConfigError, ObservationError
from runtime.policy import Policy

_logger = logging.getLogger(__name__)

UINT32 = 1 << 32


@dataclass(frozen=True)
class LoopConfig:
    period_ms: float = 20.0
    deadline_ms: float = 50.0
    stats_interval_s: float = 10.0
    max_cycles: int | None = None
    """Stop after this many cycles (benchmarks); None: run until SIGINT/SIGTERM."""
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    mode: str = "cyclic"
    """cyclic: one cycle per period; subscription: one per data-change of the PLC's sequence number."""

    def check(self) -> None:
        if self.mode not in ("cyclic", "subscription"):
            raise ConfigError(f"--mode {self.mode!r}: choose cyclic or subscription")
        if not (self.period_ms > 0 and self.deadline_ms > 0):
            raise ConfigError("--period-ms and --deadline-ms must be positive")


@dataclass
class Counters:
    cycles: int = 0
    ok: int = 0
    invalid: int = 0
    stale: int = 0
    deadline_misses: int = 0
    inference_errors: int = 0
    skipped_slots: int = 0
    reconnects: int = 0
    connection_losses: int = 0
    disconnected_s: float = 0.0


class ObservationGuard:
    """Validation and staleness: what makes the loop write the safe action instead of the policy's."""

    def __init__(self, policy: Policy, bridge: BridgeConfig):
        m = bridge.node_map
        self.dim = int(np.prod(policy.obs_shape))
        spec = policy.manifest.observation
        low = m.obs_low if m.obs_low is not None else spec.get("low", [None] * self.dim)
        high = m.obs_high if m.obs_high is not None else spec.get("high", [None] * self.dim)
        if len(low) != self.dim or len(high) != self.dim:
            raise ConfigError(
                f"observation bounds have {len(low)}/{len(high)} entries; the artifact's observation has {self.dim}"
            )
        lo = np.array([-np.inf if v is None else v for v in low], np.float64)
        hi = np.array([np.inf if v is None else v for v in high], np.float64)
        both = np.isfinite(lo) & np.isfinite(hi)
        width = np.where(both, hi - lo, np.maximum(1.0, np.abs(np.where(np.isfinite(lo), lo, hi))))
        tol = m.obs_range_tolerance * np.where(np.isfinite(width), width, 0.0)
        self.lo, self.hi = lo - tol, hi + tol
        self.stale_cycles = m.stale_cycles
        self._last_seq: Any = None
        self._unchanged = 0

    def check(self, values: Any) -> tuple[np.ndarray | None, str]:
        try:
            obs = np.asarray(values, np.float64).reshape(-1)
        except (TypeError, ValueError):
            return None, f"observation is not numeric: {values!r:.80}"
        if obs.size != self.dim:
            return None, f"observation has {obs.size} values, the policy takes {self.dim}"
        if not np.all(np.isfinite(obs)):
            return None, "observation contains NaN or Inf"
        out = (obs < self.lo) | (obs > self.hi)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            return None, f"observation[{i}] = {obs[i]:g} is outside [{self.lo[i]:g}, {self.hi[i]:g}]"
        return obs, ""

    def is_stale(self, seq: Any) -> bool:
        if seq == self._last_seq:
            self._unchanged += 1
        else:
            self._last_seq, self._unchanged = seq, 0
        return self._unchanged >= self.stale_cycles

    def reset(self) -> None:
        self._last_seq, self._unchanged = None, 0


def resolve_safe_action(policy: Policy, configured: tuple[float, ...] | None) -> list[float]:
    if policy.discrete:
        lo, hi = policy.action_index_range
        value = lo if configured is None else configured[0]
        if configured is not None and (len(configured) != 1 or not lo <= value <= hi or value != int(value)):
            raise ConfigError(f"safe_action {list(configured)} must be one action index in [{lo}, {hi}]")
        return [float(value)]
    low, high = policy.action_low.astype(np.float64), policy.action_high.astype(np.float64)
    if configured is None:
        return np.clip(np.zeros_like(low), low, high).tolist()
    safe = np.asarray(configured, np.float64)
    if safe.shape != low.shape or np.any(safe < low) or np.any(safe > high):
        raise ConfigError(
            f"safe_action {list(configured)} must have {low.size} values inside [{low.tolist()}, {high.tolist()}]"
        )
    return safe.tolist()


class ControlLoop:
    def __init__(
        self,
        policy: Policy,
        bridge: BridgeConfig,
        cfg: LoopConfig,
        client_factory: Callable[[BridgeConfig], PlcClient] = PlcClient,
    ):
        bridge.check()
        cfg.check()
        self.policy, self.bridge, self.cfg = policy, bridge, cfg
        self.guard = ObservationGuard(policy, bridge)
        self.safe_action = resolve_safe_action(policy, bridge.node_map.safe_action)
        self.counters = Counters()
        self.latency = LatencyHistogram()
        self.lateness = LatencyHistogram()  # scheduled start -> actual start: the timer's share of latency
        self._client_factory = client_factory
        self._heartbeat = 0
        self._last_status = CycleStatus.OK
        _logger.info(
            "safe action %s%s",
            self.safe_action,
            "" if bridge.node_map.safe_action is not None else " (default; set safe_action in the node map)",
        )

    # ---------------------------------------------------------------------------------------- decide
    def decide(self, values: Any, seq: Any) -> tuple[CycleStatus, list[float], str]:
        stale = self.guard.is_stale(seq)
        obs, problem = self.guard.check(values)
        if obs is None:
            return CycleStatus.INVALID_OBSERVATION, self.safe_action, problem
        if stale:
            return (
                CycleStatus.STALE,
                self.safe_action,
                f"sequence number {seq} unchanged for {self.guard.stale_cycles} cycles",
            )
        try:
            action = self.policy.predict(obs.reshape(self.policy.obs_shape))
        except (BackendError, ObservationError) as exc:
            return CycleStatus.INFERENCE_ERROR, self.safe_action, str(exc)
        return (
            CycleStatus.OK,
            ([float(action)] if self.policy.discrete else np.asarray(action, np.float64).tolist()),
            "",
        )

    def _count(self, status: CycleStatus, detail: str) -> None:
        c = self.counters
        if status == CycleStatus.OK:
            c.ok += 1
        elif status == CycleStatus.INVALID_OBSERVATION:
            c.invalid += 1
        elif status == CycleStatus.STALE:
            c.stale += 1
        elif status == CycleStatus.INFERENCE_ERROR:
            c.inference_errors += 1
        if status != self._last_status:  # log transitions, not every cycle of a lasting fault
            if status == CycleStatus.OK:
                _logger.info("back to normal operation after %s", self._last_status.name)
            else:
                _logger.warning("%s: %s; writing the safe action", status.name, detail)
            self._last_status = status

    # ------------------------------------------------------------------------------------------ cycle
    async def _cycle(self, plc: PlcClient, scheduled: float) -> None:
        loop = asyncio.get_running_loop()
        self.lateness.add(max(0.0, (loop.time() - scheduled) * 1e3))
        values, seq = await plc.read()
        status, action, detail = self.decide(values, seq)
        late_ms = (loop.time() - scheduled) * 1e3
        if late_ms > self.cfg.deadline_ms:
            status, action, detail = (
                CycleStatus.DEADLINE_MISS,
                self.safe_action,
                f"inference done {late_ms:.1f} ms after the cycle start",
            )
        self._heartbeat = (self._heartbeat + 1) % UINT32
        answered = int(seq) if isinstance(seq, int | float) and math.isfinite(seq) else 0
        await plc.write(action, answered, self._heartbeat, int(status))
        latency_ms = (loop.time() - scheduled) * 1e3
        self.latency.add(latency_ms)
        self.counters.cycles += 1
        if latency_ms > self.cfg.deadline_ms:
            self.counters.deadline_misses += 1
            if status != CycleStatus.DEADLINE_MISS:
                detail = f"cycle took {latency_ms:.1f} ms"
                status = CycleStatus.DEADLINE_MISS
        self._count(status, detail)

    # ------------------------------------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> dict[str, Any]:
        period = self.cfg.period_ms / 1e3
        started = time.time()
        while not stop.is_set() and not self._done():
            plc = await self._connect(stop)
            if plc is None:
                break
            self.guard.reset()
            try:
                if self.cfg.mode == "subscription":
                    await self._run_subscribed(plc, stop, period)
                else:
                    await self._run_cyclic(plc, stop, period)
                await self._write_safe(plc, CycleStatus.SHUTDOWN)
                await plc.close()
            except (OSError, TimeoutError, ConnectionError) as exc:
                await self._lost(plc, exc)
            except Exception as exc:  # asyncua's UaError tree and transport errors: the session is gone
                if isinstance(exc, ConfigError):
                    raise
                await self._lost(plc, exc)
        self._log_stats()
        return self.summary(started)

    async def _run_cyclic(self, plc: PlcClient, stop: asyncio.Event, period: float) -> None:
        loop = asyncio.get_running_loop()
        next_slot = last_stats = loop.time()
        while not stop.is_set() and not self._done():
            delay = next_slot - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # cheaper and more punctual than wait_for(stop.wait())
            if stop.is_set():
                break
            await self._cycle(plc, next_slot)
            next_slot += period
            behind = loop.time() - next_slot
            if behind > 0:  # overran: skip the slots already past, start the next one late
                skipped = int(behind // period)
                self.counters.skipped_slots += skipped
                next_slot += skipped * period
            last_stats = self._maybe_log_stats(last_stats)

    async def _run_subscribed(self, plc: PlcClient, stop: asyncio.Event, period: float) -> None:
        """A cycle on each new PLC sequence number (data-change notification), and at least one per period,
        so that the heartbeat keeps beating and a silent PLC is detected as stale."""
        loop = asyncio.get_running_loop()
        changes = await plc.subscribe_sequence(self.cfg.period_ms)
        last_stats = loop.time()
        while not stop.is_set() and not self._done():
            try:
                await asyncio.wait_for(changes.get(), period)
            except TimeoutError:
                pass
            if stop.is_set():
                break
            await self._cycle(plc, loop.time())  # latency from the notification's arrival
            last_stats = self._maybe_log_stats(last_stats)

    def _maybe_log_stats(self, last: float) -> float:
        now = asyncio.get_running_loop().time()
        if now - last < self.cfg.stats_interval_s:
            return last
        self._log_stats()
        return now

    def _done(self) -> bool:
        return self.cfg.max_cycles is not None and self.counters.cycles >= self.cfg.max_cycles

    async def _lost(self, plc: PlcClient, exc: BaseException) -> None:
        self.counters.connection_losses += 1
        _logger.warning(
            "connection to %s lost (%s: %s); safe action cannot be written, reconnecting",
            self.bridge.endpoint,
            type(exc).__name__,
            exc,
        )
        await plc.close()

    async def _connect(self, stop: asyncio.Event) -> PlcClient | None:
        delay, first, t0 = self.cfg.backoff_initial_s, self.counters.connection_losses == 0, time.monotonic()
        attempt = 0
        while not stop.is_set():
            attempt += 1
            plc = self._client_factory(self.bridge)
            try:
                await plc.__aenter__()
            except ConfigError:
                raise
            except Exception as exc:
                if attempt == 1 or attempt % 10 == 0:
                    _logger.warning(
                        "cannot connect to %s (%s: %s); retrying with backoff (attempt %d)",
                        self.bridge.endpoint,
                        type(exc).__name__,
                        exc,
                        attempt,
                    )
                if await _wait(stop, delay):
                    return None
                delay = min(delay * 2, self.cfg.backoff_max_s)
                continue
            if not first:
                outage = time.monotonic() - t0
                self.counters.reconnects += 1
                self.counters.disconnected_s += outage
                _logger.info("reconnected to %s after %.1f s", self.bridge.endpoint, outage)
            await self._write_safe(plc, CycleStatus.STARTUP)
            return plc
        return None

    async def _write_safe(self, plc: PlcClient, status: CycleStatus) -> None:
        with contextlib.suppress(Exception):  # best effort: the connection may be the problem
            _, seq = await plc.read()
            self._heartbeat = (self._heartbeat + 1) % UINT32
            answered = int(seq) if isinstance(seq, int) else 0
            # STARTUP answers nothing yet (seq - 1), so a lockstep PLC does not step on it.
            await plc.write(
                self.safe_action,
                (answered - 1) % UINT32 if status == CycleStatus.STARTUP else answered,
                self._heartbeat,
                int(status),
            )

    def _log_stats(self) -> None:
        c, s = self.counters, self.latency.summary()
        _logger.info(
            "cycles %d | latency p50 %.2f ms p99 %.2f ms max %.2f ms | deadline misses %d invalid %d stale %d "
            "inference errors %d | reconnects %d",
            c.cycles,
            s["p50"],
            s["p99"],
            s["max"],
            c.deadline_misses,
            c.invalid,
            c.stale,
            c.inference_errors,
            c.reconnects,
        )

    def summary(self, started: float) -> dict[str, Any]:
        s, late = self.latency.summary(), self.lateness.summary()
        return {
            "endpoint": self.bridge.endpoint,
            "artifact": str(self.policy.manifest.path),
            "security": self.bridge.security.mode,
            "period_ms": self.cfg.period_ms,
            "deadline_ms": self.cfg.deadline_ms,
            "wall_time_s": time.time() - started,
            **asdict(self.counters),
            "latency_ms": {
                "p50": s["p50"],
                "p99": s["p99"],
                "p99.9": s["p99.9"],
                "max": s["max"],
                "mean": s["mean"],
            },
            "start_lateness_ms": {"p50": late["p50"], "p99": late["p99"], "max": late["max"]},
        }


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep, waking early on stop; True if stopped."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except TimeoutError:
        return False
