"""The deadline-aware control loop of `rl2edge serve`.

Each period: one Read (observation + the PLC's sequence number, with their qualities), validate, infer,
then the handshake of `PlcClient.answer`: action + heartbeat, and only once the PLC accepted them, the
status with the sequence number they answer. Latency is measured from the cycle's scheduled start, so a late
cycle counts as late.

What goes wrong is sorted by what it means:
- the data (Bad/Uncertain quality, NaN, out of range, stale, a deadline miss, an inference error): the
  safe action and a status code, logged on each transition and counted; the loop keeps cycling;
- the PLC refusing a written value (WRITE_REJECTED): the safe action where it can still be written, no
  answered sequence number (the PLC does not step), counted; not a reconnect;
- the connection lost: reconnect with a backoff that grows until a cycle completes again;
- the configuration (a node that does not exist or does not fit, a refused certificate): at the first
  connect, a `ConfigError` (one line, exit 2); after the loop has run, retried with backoff and logged,
  since a PLC whose program is being downloaded loses its nodes for a while.

Every cycle that read a valid sequence number answers it, with the policy's action (OK) or the safe one
(any fault status). STARTUP and SHUTDOWN answer nothing: they write the safe action and the status and
leave the answered sequence number as it is.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.errors import BackendError, ConfigError, ObservationError, short_repr
from rl2edge.plc_bridge.client import (
    BridgeConfig,
    PlantIo,
    PlcClient,
    Reading,
    connect_error_hint,
    plant_io_of,
)
from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.slot_timer import until_slot
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.policy import Policy

if TYPE_CHECKING:
    from rl2edge.plc_bridge.policy_update import PolicyUpdates

_logger = logging.getLogger(__name__)

_FLOAT32_MAX = float(np.finfo(np.float32).max)

PERIOD_RANGE_MS = (1.0, 60_000.0)
DEFAULT_SPIN_MS = 2.0
"""A control period shorter than 1 ms is a busy loop on these machines; one longer than a minute is not
a control loop. Stop requests wake the loop at once whatever the period."""


@dataclass(frozen=True)
class LoopConfig:
    period_ms: float = 20.0
    deadline_ms: float = 50.0
    stats_interval_s: float = 10.0
    max_cycles: int | None = None
    """Stop after this many cycles (benchmarks); None: run until SIGINT/SIGTERM."""
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 1.0
    """One connect attempt a second to a PLC that is down is no storm (a refused TCP connect, or one
    timeout), and a PLC back from a restart is found within a second; at 5 s a 2 s outage could cost
    3 s more of safe action (measured by benchmarks/plc_restart_soak.py)."""
    mode: str = "cyclic"
    """cyclic: one cycle per period; subscription: one per data-change of the PLC's sequence number."""
    spin_ms: float | None = None
    """Cyclic mode: wake from the event loop this long before each slot, then sleep in the kernel and spin
    the last 0.15 ms (plc_bridge.slot_timer): the event loop's timer wakes up to a millisecond late (its
    poll timeout has millisecond resolution; benchmarks/loop_latency.py reports the start lateness).
    While enough of it is left, the decision is warmed up on the last observation first. 0: the event
    loop's timer alone. None: DEFAULT_SPIN_MS, or half the period where that is shorter (see `lead_ms`)."""

    @property
    def lead_ms(self) -> float:
        """The lead in use: spin_ms as given, else 2 ms, or half of a period shorter than 4 ms."""
        return self.spin_ms if self.spin_ms is not None else min(DEFAULT_SPIN_MS, self.period_ms / 2)

    def check(self) -> None:
        if self.mode not in ("cyclic", "subscription"):
            raise ConfigError(f"--mode {self.mode!r}: choose cyclic or subscription")
        lo, hi = PERIOD_RANGE_MS
        if not lo <= self.period_ms <= hi:  # also refuses NaN and inf, which would never wake or spin
            raise ConfigError(f"--period-ms {self.period_ms:g}: choose a period from {lo:g} to {hi:g} ms")
        if self.spin_ms is not None and not 0 <= self.spin_ms < self.period_ms:
            raise ConfigError(
                f"--spin-ms {self.spin_ms:g}: choose from 0 to less than the period ({self.period_ms:g} ms)"
            )
        if not 0 < self.deadline_ms <= hi:
            raise ConfigError(
                f"--deadline-ms {self.deadline_ms:g}: choose a deadline above 0 and up to {hi:g} ms"
            )


@dataclass
class Counters:
    cycles: int = 0
    ok: int = 0
    invalid: int = 0
    stale: int = 0
    deadline_misses: int = 0
    inference_errors: int = 0
    write_rejected: int = 0
    bad_quality: int = 0
    """Part of `invalid`: cycles whose observation or sequence number the PLC marked Bad or Uncertain."""
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
        huge = (
            np.abs(obs) > _FLOAT32_MAX
        )  # finite here, Inf in the model's float32: bad data, not the model's fault
        if huge.any():
            i = int(np.flatnonzero(huge)[0])
            return None, f"observation[{i}] = {obs[i]:g} is beyond float32's range (the model's input type)"
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

    def adopt_staleness(self, other: ObservationGuard) -> None:
        """Continue another guard's count of unchanged sequence numbers (a policy swap is no new session)."""
        self._last_seq, self._unchanged = other._last_seq, other._unchanged


@dataclass(frozen=True)
class Serving:
    """A policy with what the loop needs to serve it."""

    policy: Policy
    guard: ObservationGuard
    safe_action: list[float]


def _io_text(io: PlantIo) -> str:
    if io.discrete:
        return f"Discrete({int(io.action_high[0] - io.action_low[0]) + 1})"
    return f"Box(low={list(io.action_low)}, high={list(io.action_high)})"


def resolve_safe_action(policy: Policy, configured: tuple[float, ...] | None) -> list[float]:
    if policy.discrete:
        lo, hi = policy.action_index_range
        if configured is None:
            return [float(lo)]
        if len(configured) != 1 or not lo <= configured[0] <= hi or configured[0] != int(configured[0]):
            raise ConfigError(
                f"safe_action {short_repr(list(configured))} must be one action index in [{lo}, {hi}]"
            )
        return [float(configured[0])]
    low, high = policy.action_low.astype(np.float64), policy.action_high.astype(np.float64)
    if configured is None:
        return np.clip(np.zeros_like(low), low, high).tolist()
    safe = np.asarray(configured, np.float64)
    if safe.shape != low.shape or np.any(safe < low) or np.any(safe > high):
        raise ConfigError(
            f"safe_action {short_repr(list(configured))} must have {low.size} values inside [{short_repr(low.tolist())}, {short_repr(high.tolist())}]"
        )
    return safe.tolist()


class ControlLoop:
    def __init__(
        self,
        policy: Policy,
        bridge: BridgeConfig,
        cfg: LoopConfig,
        client_factory: Callable[[BridgeConfig, PlantIo], PlcClient] = PlcClient,
    ):
        bridge.check()
        cfg.check()
        self.policy, self.bridge, self.cfg = policy, bridge, cfg
        self.guard = ObservationGuard(policy, bridge)
        self.safe_action = resolve_safe_action(policy, bridge.node_map.safe_action)
        self.counters = Counters()
        self.latency = LatencyHistogram()
        self.window = LatencyHistogram()  # since the last stats line: a soak sees drift, not a run-long blur
        self.lateness = LatencyHistogram()  # scheduled start -> actual start: the timer's share of latency
        self._client_factory = client_factory
        self.io = plant_io_of(policy)
        self._last_status = CycleStatus.OK
        self._backoff_s = cfg.backoff_initial_s
        """Grows with every failed connect or lost session; back to the start only once a cycle completes."""
        self._ran = False
        """A cycle has completed: configuration errors are from now on retried, not fatal."""
        self.publishing_interval_ms: float | None = None
        self._last_stats: float | None = None
        self._started = time.time()
        self._cpu_started = time.process_time()
        self.connected = False
        self.last_status: CycleStatus | None = None
        """The status of the last completed cycle (None before the first)."""
        self.last_cycle_at: float | None = None
        self.outage_started: float | None = None
        """When the current outage began (time.monotonic), while reconnecting after a loss."""
        self.progress_at = time.monotonic()
        """When the loop last showed it is alive: a cycle, a counted deadline miss, a connect attempt, a
        backoff wake-up (time.monotonic). /healthz and the systemd watchdog read it."""
        self._warm_obs: np.ndarray | None = None  # the last valid observation, for the warm-up in the spin
        # A decaying maximum of how long a decision takes (the cycles' own and the warm-ups): a warm-up
        # runs only where twice that is left of the lead, so a model slower than the lead (a CNN on a
        # Jetson) is never warmed up into the slot.
        self._decision_s = 0.0
        self.updater: PolicyUpdates | None = None
        """Hot policy updates (plc_bridge.policy_update): asked before each cycle whether a verified new
        policy takes over, and shown each OK cycle's observation for its shadow run."""
        self.on_cycle: Callable[[float, float], None] | None = None
        """Called after each cycle with (latency ms, start lateness ms): the metrics' histograms."""
        self.on_stats: Callable[[dict[str, Any]], None] | None = None
        """Called with the summary at every stats interval: the summary file rewritten while serving."""
        self._phase, self._missed = "read", False
        """Where the current cycle waits, and whether its deadline already passed (counted then)."""
        _logger.info(
            "safe action %s%s",
            self.safe_action,
            "" if bridge.node_map.safe_action is not None else " (default; set safe_action in the node map)",
        )

    # ------------------------------------------------------------------------------- policy updates
    def prepare(self, policy: Policy) -> Serving:
        """What serving `policy` takes (its guard and safe action), or a ConfigError saying why it does not
        fit this loop: the node map and the PLC's nodes were checked against the serving policy's specs."""
        if tuple(policy.obs_shape) != tuple(self.policy.obs_shape):
            raise ConfigError(
                f"its observation has shape {list(policy.obs_shape)}, the serving policy's "
                f"{list(self.policy.obs_shape)}"
            )
        io = plant_io_of(policy)
        if io != self.io:
            raise ConfigError(
                f"its action spec {_io_text(io)} is not the serving policy's {_io_text(self.io)}"
            )
        return Serving(
            policy,
            ObservationGuard(policy, self.bridge),
            resolve_safe_action(policy, self.bridge.node_map.safe_action),
        )

    def install(self, serving: Serving) -> None:
        """Serve another policy from the next cycle on (between two cycles: nothing is in flight)."""
        serving.guard.adopt_staleness(self.guard)
        self.policy, self.guard, self.safe_action = serving.policy, serving.guard, serving.safe_action

    # ---------------------------------------------------------------------------------------- decide
    def decide(self, values: Any, seq: Any) -> tuple[CycleStatus, list[float], str]:
        stale = self.guard.is_stale(seq)
        obs, problem = self.guard.check(values)
        if obs is not None:
            self._warm_obs = obs
        if obs is None:
            return CycleStatus.INVALID_OBSERVATION, self.safe_action, problem
        if stale:
            return (
                CycleStatus.STALE,
                self.safe_action,
                f"sequence number {seq} unchanged for {self.guard.stale_cycles} cycles",
            )
        try:
            action = self.policy.predict(obs, validated=True)  # checked above: shape, finite, range
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
        elif status == CycleStatus.WRITE_REJECTED:
            c.write_rejected += 1
        if status != self._last_status:  # log transitions, not every cycle of a lasting fault
            if status == CycleStatus.OK:
                _logger.info("back to normal operation after %s", self._last_status.name)
            else:
                _logger.warning("%s: %s; writing the safe action", status.name, detail)
            self._last_status = status

    # ------------------------------------------------------------------------------------------ cycle
    async def _cycle(self, plc: PlcClient, scheduled: float) -> None:
        loop = asyncio.get_running_loop()
        lateness_ms = max(0.0, (loop.time() - scheduled) * 1e3)
        if self.updater is not None:  # between two cycles: a verified new policy takes over here
            self.updater.before_cycle()
        # A PLC that stops answering (TCP open, no replies) holds the read or the write until the request
        # timeout, far past the deadline: the miss is counted and logged when the deadline passes, and the
        # safe action goes out with the first write that gets through (this cycle's, late, or STARTUP's
        # after a reconnect).
        self._phase, self._missed = "read", False
        watchdog = loop.call_at(scheduled + self.cfg.deadline_ms / 1e3, self._deadline_passed)
        try:
            latency_ms = await self._cycle_io(plc, scheduled, loop)
        finally:
            watchdog.cancel()
        self.lateness.add(lateness_ms)  # bookkeeping after the cycle's I/O, outside its latency
        if self.on_cycle is not None:
            self.on_cycle(latency_ms, lateness_ms)

    def _deadline_passed(self) -> None:
        self.progress_at = time.monotonic()  # the loop noticed: alive, whatever the PLC does
        self._missed = True
        self.counters.cycles += 1
        self.counters.deadline_misses += 1
        self._count(
            CycleStatus.DEADLINE_MISS,
            f"the cycle was still waiting for its {self._phase} {self.cfg.deadline_ms:g} ms after its start",
        )

    async def _cycle_io(self, plc: PlcClient, scheduled: float, loop: asyncio.AbstractEventLoop) -> float:
        """One cycle's I/O and decision; its latency in ms."""
        reading: Reading = await plc.read()
        if reading.problem:
            self.guard.is_stale(reading.sequence)
            self.counters.bad_quality += 1
            status, action, detail = CycleStatus.INVALID_OBSERVATION, self.safe_action, reading.problem
        else:
            t0 = loop.time()
            status, action, detail = self.decide(reading.observation, reading.sequence)
            self._note_decision(loop.time() - t0)
        late_ms = (loop.time() - scheduled) * 1e3
        if late_ms > self.cfg.deadline_ms:
            status, action, detail = (
                CycleStatus.DEADLINE_MISS,
                self.safe_action,
                f"inference done {late_ms:.1f} ms after the cycle start",
            )
        seq = reading.sequence
        self._phase = "write"
        try:
            if isinstance(seq, int) and not isinstance(
                seq, bool
            ):  # answered, with the safe action on a fault
                result = await plc.answer(action, int(status), seq)
            else:  # no valid sequence number to answer
                result = await plc.write_safe(action, int(status))
            problem = f"the PLC refused {', '.join(result.refused)}" if result.refused else ""
        except ValueError as exc:  # a value that does not fit its node's type (ranges are checked at connect)
            problem = f"a value does not fit its node: {exc}"
        if problem:
            status, detail = CycleStatus.WRITE_REJECTED, problem
            retry = await plc.write_safe(self.safe_action, int(status))
            if retry.refused:
                detail += f"; the safe action was refused too ({', '.join(retry.refused)})"
        latency_ms = (loop.time() - scheduled) * 1e3
        self.latency.add(latency_ms)
        self.window.add(latency_ms)
        self._ran = True
        self._backoff_s = self.cfg.backoff_initial_s
        self.last_cycle_at = self.progress_at = time.monotonic()
        if self._missed:  # counted and logged when the deadline passed
            status = CycleStatus.DEADLINE_MISS
        else:
            self.counters.cycles += 1
            if latency_ms > self.cfg.deadline_ms:  # past the deadline before the watchdog's turn came
                self.counters.deadline_misses += 1
                if status != CycleStatus.DEADLINE_MISS:
                    detail = f"cycle took {latency_ms:.1f} ms"
                    status = CycleStatus.DEADLINE_MISS
            self._count(status, detail)
        self.last_status = status
        if self.updater is not None:  # after the write: the shadow run costs no cycle its latency
            raw = None if reading.problem else reading.observation
            self.updater.after_cycle(status, raw, action, seq, latency_ms)
        return latency_ms

    # ------------------------------------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> dict[str, Any]:
        period = self.cfg.period_ms / 1e3
        self._started = started = time.time()
        self._cpu_started = time.process_time()
        while not stop.is_set() and not self._done():
            plc = await self._connect(stop)
            if plc is None:
                break
            self.connected = True
            self.guard.reset()
            cycles_before = self.counters.cycles
            try:
                if self.cfg.mode == "subscription":
                    await self._run_subscribed(plc, stop, period)
                else:
                    await self._run_cyclic(plc, stop, period)
                await self._write_safe(plc, CycleStatus.SHUTDOWN)
                self.connected = False
                await plc.close()
            except ConfigError:
                raise
            except Exception as exc:  # asyncua's UaError tree and transport errors: the session is gone
                self.connected = False
                await self._lost(plc, exc)
                if self.counters.cycles == cycles_before:  # lost before a cycle completed: no storm
                    if await _wait(stop, self._backoff_s):
                        break
                    self._grow_backoff()
        self._log_stats()
        return self.summary(started)

    async def _run_cyclic(self, plc: PlcClient, stop: asyncio.Event, period: float) -> None:
        loop = asyncio.get_running_loop()
        lead = self.cfg.lead_ms / 1e3
        next_slot = loop.time()  # time.monotonic: what call_at and the latencies use
        stopping = asyncio.ensure_future(stop.wait())  # one waiter for the whole run, not one per cycle
        try:
            while not stop.is_set() and not self._done():
                await until_slot(next_slot, lead, stopping, self._warm_up, 2 * self._decision_s)
                if stop.is_set():
                    break
                await self._cycle(plc, next_slot)
                next_slot += period
                behind = loop.time() - next_slot
                if behind > 0:  # overran: skip the slots already past, start the next one late
                    skipped = int(behind // period)
                    self.counters.skipped_slots += skipped
                    next_slot += skipped * period
                self._maybe_log_stats()
        finally:
            stopping.cancel()

    async def _run_subscribed(self, plc: PlcClient, stop: asyncio.Event, period: float) -> None:
        """A cycle on each new PLC sequence number (data-change notification), and at least one per period,
        so that the heartbeat keeps beating and a silent PLC is detected as stale."""
        loop = asyncio.get_running_loop()
        changes = await plc.subscribe_sequence(self.cfg.period_ms)
        self.publishing_interval_ms = plc.revised_publishing_ms
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set() and not self._done():
                change = asyncio.ensure_future(changes.get())
                await asyncio.wait((change, stopping), timeout=period, return_when=asyncio.FIRST_COMPLETED)
                change.cancel()
                if stop.is_set():
                    break
                await self._cycle(plc, loop.time())  # latency from the notification's arrival
                self._maybe_log_stats()
        finally:
            stopping.cancel()

    def _warm_up(self) -> None:
        """In the spin before a cycle, the decision's code and data once more on the last valid observation,
        the result thrown away: after a period of sleep they are out of the CPU's caches, and a cold
        decision takes many times a warm one (benchmarks/loop_latency.py measures the loop with and without
        the lead). Side-effect free: no staleness count, no noise draw (Policy.warm_up)."""
        if self._warm_obs is None:
            return
        t0 = time.monotonic()
        obs, _ = self.guard.check(self._warm_obs)
        if obs is None:
            return
        try:
            self.policy.warm_up(obs)
        except Exception:  # never the loop's end, nor a reconnect: the cycle's own decision counts the fault
            _logger.debug("warm-up failed", exc_info=True)
        self._note_decision(time.monotonic() - t0)

    def _note_decision(self, seconds: float) -> None:
        self._decision_s = max(seconds, 0.99 * self._decision_s)

    def _maybe_log_stats(self) -> None:
        """A stats line every stats interval of the run, reconnects or not (the interval's clock is not
        restarted by a new session, so per-interval figures stay per interval)."""
        now = asyncio.get_running_loop().time()
        if self._last_stats is None:
            self._last_stats = now
        elif now - self._last_stats >= self.cfg.stats_interval_s:
            self._log_stats()
            self._last_stats = now

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
        """A session whose node map checked out, after the STARTUP write; None if stopped first."""
        first, t0, attempt = self.counters.connection_losses == 0, time.monotonic(), 0
        self.outage_started = None if first else t0
        while not stop.is_set():
            attempt += 1
            self.progress_at = time.monotonic()
            plc = self._client_factory(self.bridge, self.io)
            try:
                await plc.__aenter__()
            except Exception as exc:
                problem = str(exc) if isinstance(exc, ConfigError) else connect_error_hint(exc, self.bridge)
                if problem is not None and not self._ran:
                    raise ConfigError(problem) from None  # wrong from the start: retrying cannot fix it
                if attempt == 1 or attempt % 10 == 0:
                    _logger.warning(
                        "cannot connect to %s (%s); retrying with backoff (attempt %d, next in %.1f s)",
                        self.bridge.endpoint,
                        problem or f"{type(exc).__name__}: {exc}",
                        attempt,
                        self._backoff_s,
                    )
                if await _wait(stop, self._backoff_s):
                    return None
                self.progress_at = time.monotonic()
                self._grow_backoff()
                continue
            if not first:
                outage = time.monotonic() - t0
                self.counters.reconnects += 1
                self.counters.disconnected_s += outage
                self.outage_started = None
                _logger.info("reconnected to %s after %.1f s", self.bridge.endpoint, outage)
            await self._write_safe(plc, CycleStatus.STARTUP)
            return plc
        return None

    def _grow_backoff(self) -> None:
        self._backoff_s = min(self._backoff_s * 2, self.cfg.backoff_max_s)

    async def _write_safe(self, plc: PlcClient, status: CycleStatus) -> None:
        """STARTUP and SHUTDOWN: the safe action and the status, answering no sequence number."""
        try:
            result = await plc.write_safe(self.safe_action, int(status))
        except Exception as exc:  # best effort: the connection may be the problem
            _logger.debug("%s write failed: %s", status.name, exc)
            return
        if result.refused:
            _logger.warning("%s: the PLC refused %s", status.name, ", ".join(result.refused))

    def _log_stats(self) -> None:
        c, s, w = self.counters, self.latency.summary(), self.window.summary()
        _logger.info(
            "cycles %d | latency p50 %.2f ms p99 %.2f ms max %.2f ms | since last %d cycles p50 %.2f ms p99 %.2f ms "
            "max %.2f ms | deadline misses %d invalid %d stale %d inference errors %d write rejected %d | "
            "reconnects %d",
            c.cycles,
            s["p50"],
            s["p99"],
            s["max"],
            self.window.count,
            w["p50"],
            w["p99"],
            w["max"],
            c.deadline_misses,
            c.invalid,
            c.stale,
            c.inference_errors,
            c.write_rejected,
            c.reconnects,
        )
        self.window = LatencyHistogram()
        if self.on_stats is not None:
            self.on_stats(self.summary(self._started))

    def disconnected_s(self) -> float:
        """Seconds without a session after a loss, the outage under way included."""
        ongoing = 0.0 if self.outage_started is None else time.monotonic() - self.outage_started
        return self.counters.disconnected_s + ongoing

    def summary(self, started: float) -> dict[str, Any]:
        s, late = self.latency.summary(), self.lateness.summary()
        summary = {
            "endpoint": self.bridge.endpoint,
            "artifact": str(self.policy.manifest.path),
            "security": self.bridge.security.mode,
            "period_ms": self.cfg.period_ms,
            "deadline_ms": self.cfg.deadline_ms,
            "wall_time_s": time.time() - started,
            **asdict(self.counters),
            "disconnected_s": self.disconnected_s(),
            "latency_ms": {
                "p50": s["p50"],
                "p99": s["p99"],
                "p99.9": s["p99.9"],
                "max": s["max"],
                "mean": s["mean"],
            },
            "start_lateness_ms": {"p50": late["p50"], "p99": late["p99"], "max": late["max"]},
            # the process's CPU time (this loop, the OPC UA client, the spin) per completed cycle
            "cpu_ms_per_cycle": (time.process_time() - self._cpu_started) * 1e3 / self.counters.cycles
            if self.counters.cycles
            else None,
            "spin_ms": self.cfg.lead_ms,
            "mode": self.cfg.mode,
            "publishing_interval_ms": self.publishing_interval_ms,
        }
        stats = getattr(self.policy.backend, "stats", None)  # the model's own process (runtime.model_process)
        summary["model_process"] = stats.to_json() if stats is not None else None
        if self.updater is not None:
            summary["policy"] = self.updater.summary()
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


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep, waking early on stop; True if stopped."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except (TimeoutError, asyncio.TimeoutError):  # distinct before 3.11
        return False
