"""The deadline-aware control loop of `rl2edge serve`.

Each period: one Read (observation + the PLC's sequence number, with their qualities), validate, infer,
then the handshake of `PlcClient.answer`: action + heartbeat, and only once the PLC accepted them, the
status with the sequence number they answer. Latency is measured from the cycle's scheduled start, so a late
cycle counts as late.

What goes wrong is sorted by what it means:
- the data (Bad/Uncertain quality, NaN, out of range, stale, a deadline miss, an inference error): what
  the node map's fault response chooses (the safe action, the last action held, or a ramp to the safe
  action; plc_bridge.fault_response) and a status code, logged on each transition and counted; the loop
  keeps cycling;
- the PLC refusing a written value (WRITE_REJECTED): the safe action where it can still be written, no
  answered sequence number (the PLC does not step), counted; not a reconnect;
- the connection lost: reconnect with a backoff that grows until a cycle completes again;
- the configuration (a node that does not exist or does not fit, a refused certificate): at the first
  connect, a `ConfigError` (one line, exit 2); after the loop has run, retried with backoff and logged,
  since a PLC whose program is being downloaded loses its nodes for a while.

Every cycle that read a valid sequence number answers it, with the policy's action (OK) or the fault
response's (any fault status). STARTUP and SHUTDOWN answer nothing: they write the safe action and the status and
leave the answered sequence number as it is. A stateful policy's state advances and restarts by the rules
of plc_bridge.policy_state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from rl2edge.errors import BackendError, ConfigError, ObservationError
from rl2edge.plc_bridge.binding import PlantIo, plant_io_of
from rl2edge.plc_bridge.client import BridgeConfig, PlcClient, Reading, connect_error_hint
from rl2edge.plc_bridge.fault_injection import FaultInjection, FaultInjector
from rl2edge.plc_bridge.fault_response import HELD, RAMPING
from rl2edge.plc_bridge.hooks import CycleOutcome, LoopHooks, NoHooks
from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.loop_state import Counters, CycleState, Latencies, Link, RunClock
from rl2edge.plc_bridge.observation_guard import ObservationGuard, Serving
from rl2edge.plc_bridge.policy_state import PolicyStateRules
from rl2edge.plc_bridge.realtime import GcPacer
from rl2edge.plc_bridge.slot_timer import until_slot
from rl2edge.plc_bridge.snapshot import LatencyFigures, LoopSnapshot, summary_of
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.policy import Policy

_logger = logging.getLogger(__name__)

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
    gc_after_write: bool = False
    """`serve --realtime`: the garbage collector runs after each write (plc_bridge.realtime.GcPacer), the
    automatic one being off."""
    realtime: Mapping[str, Any] | None = None
    """What `serve` runs with (plc_bridge.realtime.RealtimeState), for the summary."""
    inject_faults: FaultInjection | None = None
    """Commissioning (`serve --inject-faults`): faults drawn per cycle and answered as the map says."""

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


class ControlLoop:
    def __init__(
        self,
        policy: Policy,
        bridge: BridgeConfig,
        cfg: LoopConfig,
        hooks: LoopHooks | None = None,
        client_factory: Callable[[BridgeConfig, PlantIo], PlcClient] = PlcClient,
    ):
        """`hooks`: what runs beside the loop (policy updates, metrics, the summary file); None: nothing."""
        bridge.check()
        cfg.check()
        self.bridge, self.cfg = bridge, cfg
        self.serving = Serving.of(policy, bridge.node_map)
        self.hooks: LoopHooks = hooks if hooks is not None else NoHooks()
        self.io = plant_io_of(policy)
        self.counters = Counters()
        self.latencies = Latencies()
        self.link = Link(backoff_s=cfg.backoff_initial_s)
        self._client_factory = client_factory
        self._cycle_state = CycleState()
        self._clock = RunClock()
        self._gc = GcPacer() if cfg.gc_after_write else None
        self._injector = FaultInjector(cfg.inject_faults) if cfg.inject_faults is not None else None
        _logger.info(
            "safe action %s%s",
            self.safe_action,
            "" if bridge.node_map.safe_action is not None else " (default; set safe_action in the node map)",
        )
        self.state_rules = PolicyStateRules(self.counters)
        self.state_rules.bind(policy, bridge.node_map.episode_start)

    @property
    def policy(self) -> Policy:
        return self.serving.policy

    @property
    def guard(self) -> ObservationGuard:
        return self.serving.guard

    @property
    def safe_action(self) -> list[float]:
        return self.serving.safe_action

    # ------------------------------------------------------------------------------- policy updates
    def install(self, serving: Serving) -> None:
        """Serve another policy from the next cycle on (between two cycles: nothing is in flight)."""
        serving.guard.adopt_staleness(self.guard)
        serving.faults.adopt(self.serving.faults)
        self.serving = serving
        self.state_rules.take_over(serving.policy)

    # ------------------------------------------------------------------------------------- snapshot
    def snapshot(self, full: bool = False) -> LoopSnapshot:
        """The loop's state now, frozen: what the metrics, the health checks and the summary read. `full`:
        with the latency percentiles, the model process's figures and the updates' record (the summary's)."""
        counts: dict[str, float] = dict(vars(self.counters))
        counts["disconnected_s"] = self.disconnected_s()
        link, policy = self.link, self.policy
        extra: dict[str, Any] = {}
        if full:
            stats = getattr(policy.backend, "stats", None)  # the model's own process (runtime.model_process)
            extra = {
                "latency": _figures(self.latencies.total),
                "start_lateness": _figures(self.latencies.lateness),
                "model_process": stats.to_json() if stats is not None else None,
                "update_summary": self.hooks.update_summary(),
            }
        return LoopSnapshot(
            taken_at=time.monotonic(),
            endpoint=self.bridge.endpoint,
            security=self.bridge.security.mode,
            mode=self.cfg.mode,
            period_ms=self.cfg.period_ms,
            deadline_ms=self.cfg.deadline_ms,
            spin_ms=self.cfg.lead_ms,
            publishing_interval_ms=link.publishing_interval_ms,
            connected=link.connected,
            progress_at=link.progress_at,
            last_cycle_at=link.last_cycle_at,
            last_status=link.last_status,
            counts=MappingProxyType(counts),
            manifest=policy.manifest,
            backend_name=policy.backend_name,
            updates=self.hooks.update_state(),
            wall_time_s=time.time() - self._clock.started,
            cpu_s=time.process_time() - self._clock.cpu_started,
            stale_after=self.guard.staleness.rule,
            realtime=self.cfg.realtime,
            drift=self.hooks.drift_state(),
            record=self.hooks.record_state(),
            **extra,
        )

    # ---------------------------------------------------------------------------------------- decide
    def decide(
        self, values: Any, seq: Any, now: float | None = None, episode_start: bool = False
    ) -> tuple[CycleStatus, list[float], str]:
        """The cycle's status, action and detail for an observation and its sequence number read at `now`
        (monotonic seconds; the time of the call if None). `episode_start`: the PLC flags this observation
        as an episode's first (the node map's episode_start node): a stateful policy starts afresh."""
        stale, why = self.guard.is_stale(seq, time.monotonic() if now is None else now)
        rules = self.state_rules
        rules.note_reading(seq, episode_start)
        obs, problem = self.guard.check(values)
        if obs is not None:
            self._cycle_state.warm_obs = obs
        if obs is None:
            return CycleStatus.INVALID_OBSERVATION, self.safe_action, problem
        if stale:
            rules.reset_before_next("the plant went unobserved past the stale limit")
            return CycleStatus.STALE, self.safe_action, why
        again = rules.decided_already(seq)
        if again is not None:
            return CycleStatus.OK, again, ""  # this plant step's decision, written again
        rules.before_predict(self.policy)  # the PLC's episode start, or one of serve's reset rules
        try:
            action = self.policy.predict(obs, validated=True)  # checked above: shape, finite, range
        except (BackendError, ObservationError) as exc:
            # the call may have advanced the state before failing: start afresh rather than twice on one step
            rules.reset_before_next("an inference error")
            return CycleStatus.INFERENCE_ERROR, self.safe_action, str(exc)
        decided = [float(action)] if self.policy.discrete else np.asarray(action, np.float64).tolist()
        rules.after_predict(seq, decided)
        return CycleStatus.OK, decided, ""

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
        state = self._cycle_state
        if status != state.logged_status:  # log transitions, not every cycle of a lasting fault
            if status == CycleStatus.OK:
                _logger.info("back to normal operation after %s", state.logged_status.name)
            else:
                _logger.warning("%s: %s; %s", status.name, detail, self.serving.faults.describe(status))
            state.logged_status = status

    # ------------------------------------------------------------------------------------------ cycle
    async def _cycle(self, plc: PlcClient, scheduled: float) -> None:
        loop = asyncio.get_running_loop()
        lateness_ms = max(0.0, (loop.time() - scheduled) * 1e3)
        # between two cycles: a verified new policy takes over here
        serving = self.hooks.before_cycle(self.counters.cycles)
        if serving is not None:
            self.install(serving)
        # A PLC that stops answering (TCP open, no replies) holds the read or the write until the request
        # timeout, far past the deadline: the miss is counted and logged when the deadline passes, and the
        # fault response (a hold counted from the deadline) goes out with the first write that gets through
        # (this cycle's, late, or STARTUP's safe action after a reconnect).
        self._cycle_state.phase, self._cycle_state.missed = "read", False
        watchdog = loop.call_at(scheduled + self.cfg.deadline_ms / 1e3, self._deadline_passed)
        try:
            reading, status, action, latency_ms = await self._cycle_io(plc, scheduled, loop)
        finally:
            watchdog.cancel()
        self.latencies.lateness.add(lateness_ms)  # bookkeeping after the cycle's I/O, outside its latency
        # after the write: the shadow run and the metrics cost no cycle its latency
        self.hooks.after_cycle(
            CycleOutcome(
                status=status,
                observation=None if reading.problem else reading.observation,
                action=action,
                sequence=reading.sequence,
                latency_ms=latency_ms,
                lateness_ms=lateness_ms,
                cycles=self.counters.cycles,
                episode_start=reading.episode_start,
                predicted=self.state_rules.predicted_now,
                state_reset=self.state_rules.reset_now,
            )
        )
        if self._gc is not None:
            self._gc.collect_if_due()

    def _deadline_passed(self) -> None:
        self.link.progress_at = time.monotonic()  # the loop noticed: alive, whatever the PLC does
        self._cycle_state.missed = True
        self.counters.cycles += 1
        self.counters.deadline_misses += 1
        self._count(
            CycleStatus.DEADLINE_MISS,
            f"the cycle was still waiting for its {self._cycle_state.phase} {self.cfg.deadline_ms:g} ms after "
            "its start",
        )

    async def _cycle_io(
        self, plc: PlcClient, scheduled: float, loop: asyncio.AbstractEventLoop
    ) -> tuple[Reading, CycleStatus, list[float], float]:
        """One cycle's I/O and decision: what was read, the status, the action written, the latency in ms."""
        reading: Reading = await plc.read()
        if reading.problem:
            self.state_rules.note_reading(reading.sequence, reading.episode_start)
            self.guard.is_stale(reading.sequence, loop.time())
            self.counters.bad_quality += 1
            status, action, detail = CycleStatus.INVALID_OBSERVATION, self.safe_action, reading.problem
        else:
            t0 = loop.time()
            status, action, detail = self.decide(
                reading.observation, reading.sequence, t0, reading.episode_start
            )
            self._note_decision(loop.time() - t0)
            if self._injector is not None and status == CycleStatus.OK:
                injected = self._injector.draw()
                if injected is not None:  # the policy's action stands as the decision the fault overtook
                    status, detail = injected, "injected by --inject-faults"
        now = loop.time()
        late_ms = (now - scheduled) * 1e3
        fault_began = now
        if late_ms > self.cfg.deadline_ms:
            status, action, detail = (
                CycleStatus.DEADLINE_MISS,
                self.safe_action,
                f"inference done {late_ms:.1f} ms after the cycle start",
            )
            fault_began = scheduled + self.cfg.deadline_ms / 1e3  # a hold counts from the deadline
        # the map's response to a fault: the safe action, the last action held, or a ramp toward safe
        action, code = self.serving.faults.respond(status, action, now, fault_began)
        seq = reading.sequence
        self._cycle_state.phase = "write"
        try:
            if isinstance(seq, int) and not isinstance(seq, bool):  # answered
                result = await plc.answer(action, code, seq)
            else:  # no valid sequence number to answer
                result = await plc.write_safe(action, code)
            problem = f"the PLC refused {', '.join(result.refused)}" if result.refused else ""
        except ValueError as exc:  # a value that does not fit its node's type (ranges are checked at connect)
            problem = f"a value does not fit its node: {exc}"
        if not problem and code & HELD:
            self.counters.held += 1
        elif not problem and code & RAMPING:
            self.counters.ramped += 1
        if problem:
            status, detail = CycleStatus.WRITE_REJECTED, problem
            self.serving.faults.forget()
            retry = await plc.write_safe(self.safe_action, int(status))
            if retry.refused:
                detail += f"; the safe action was refused too ({', '.join(retry.refused)})"
        latency_ms = (loop.time() - scheduled) * 1e3
        self.latencies.total.add(latency_ms)
        self.latencies.window.add(latency_ms)
        link = self.link
        link.ran = True
        link.backoff_s = self.cfg.backoff_initial_s
        link.last_cycle_at = link.progress_at = time.monotonic()
        if self._cycle_state.missed:  # counted and logged when the deadline passed
            status = CycleStatus.DEADLINE_MISS
        else:
            self.counters.cycles += 1
            if latency_ms > self.cfg.deadline_ms or status == CycleStatus.DEADLINE_MISS:
                # past the deadline before the watchdog's turn came, or a miss --inject-faults drew
                self.counters.deadline_misses += 1
                if status != CycleStatus.DEADLINE_MISS:
                    detail = f"cycle took {latency_ms:.1f} ms"
                    status = CycleStatus.DEADLINE_MISS
            self._count(status, detail)
        link.last_status = status
        return reading, status, action, latency_ms

    # ------------------------------------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event) -> dict[str, Any]:
        period = self.cfg.period_ms / 1e3
        self._clock = RunClock()
        while not stop.is_set() and not self._done():
            plc = await self._connect(stop)
            if plc is None:
                break
            self.link.connected = True
            self.guard.reset()
            # a (re)connect starts the policy's state afresh: the plant may have moved on while unobserved
            self.state_rules.reset_before_next(
                "connected" if self.counters.reconnects == 0 else "reconnected"
            )
            if self._gc is not None:  # connected: what start-up made stays out of every collection
                self._gc.freeze()
            cycles_before = self.counters.cycles
            try:
                if self.cfg.mode == "subscription":
                    await self._run_subscribed(plc, stop, period)
                else:
                    await self._run_cyclic(plc, stop, period)
                await self._write_safe(plc, CycleStatus.SHUTDOWN)
                self.link.connected = False
                await plc.close()
            except ConfigError:
                raise
            except Exception as exc:  # asyncua's UaError tree and transport errors: the session is gone
                self.link.connected = False
                await self._lost(plc, exc)
                if self.counters.cycles == cycles_before:  # lost before a cycle completed: no storm
                    if await _wait(stop, self.link.backoff_s):
                        break
                    self._grow_backoff()
        self._log_stats()
        return self.summary()

    async def _run_cyclic(self, plc: PlcClient, stop: asyncio.Event, period: float) -> None:
        loop = asyncio.get_running_loop()
        lead = self.cfg.lead_ms / 1e3
        next_slot = loop.time()  # time.monotonic: what call_at and the latencies use
        stopping = asyncio.ensure_future(stop.wait())  # one waiter for the whole run, not one per cycle
        try:
            while not stop.is_set() and not self._done():
                await until_slot(next_slot, lead, stopping, self._warm_up, 2 * self._cycle_state.decision_s)
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
        self.link.publishing_interval_ms = plc.revised_publishing_ms
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
        if self._cycle_state.warm_obs is None:
            return
        t0 = time.monotonic()
        obs, _ = self.guard.check(self._cycle_state.warm_obs)
        if obs is None:
            return
        try:
            self.policy.warm_up(obs)
        except Exception:  # never the loop's end, nor a reconnect: the cycle's own decision counts the fault
            _logger.debug("warm-up failed", exc_info=True)
        self._note_decision(time.monotonic() - t0)

    def _note_decision(self, seconds: float) -> None:
        state = self._cycle_state
        state.decision_s = max(seconds, 0.99 * state.decision_s)

    def _maybe_log_stats(self) -> None:
        """A stats line every stats interval of the run, reconnects or not (the interval's clock is not
        restarted by a new session, so per-interval figures stay per interval)."""
        now = asyncio.get_running_loop().time()
        clock = self._clock
        if clock.last_stats is None:
            clock.last_stats = now
        elif now - clock.last_stats >= self.cfg.stats_interval_s:
            self._log_stats()
            clock.last_stats = now

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
        link = self.link
        first, t0, attempt = self.counters.connection_losses == 0, time.monotonic(), 0
        link.outage_started = None if first else t0
        while not stop.is_set():
            attempt += 1
            link.progress_at = time.monotonic()
            plc = self._client_factory(self.bridge, self.io)
            try:
                await plc.__aenter__()
            except Exception as exc:
                problem = str(exc) if isinstance(exc, ConfigError) else connect_error_hint(exc, self.bridge)
                if problem is not None and not link.ran:
                    raise ConfigError(problem) from None  # wrong from the start: retrying cannot fix it
                if attempt == 1 or attempt % 10 == 0:
                    _logger.warning(
                        "cannot connect to %s (%s); retrying with backoff (attempt %d, next in %.1f s)",
                        self.bridge.endpoint,
                        problem or f"{type(exc).__name__}: {exc}",
                        attempt,
                        link.backoff_s,
                    )
                if self._gc is not None:  # no cycles run while the PLC is away: collect in the wait
                    self._gc.collect_if_due()
                if await _wait(stop, link.backoff_s):
                    return None
                link.progress_at = time.monotonic()
                self._grow_backoff()
                continue
            if not first:
                outage = time.monotonic() - t0
                self.counters.reconnects += 1
                self.counters.disconnected_s += outage
                link.outage_started = None
                _logger.info("reconnected to %s after %.1f s", self.bridge.endpoint, outage)
            self.serving.faults.forget()
            await self._write_safe(plc, CycleStatus.STARTUP)
            return plc
        return None

    def _grow_backoff(self) -> None:
        self.link.backoff_s = min(self.link.backoff_s * 2, self.cfg.backoff_max_s)

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
        c, s = self.counters, self.latencies.total.summary()
        window = self.latencies.window
        w = window.summary()
        _logger.info(
            "cycles %d | latency p50 %.2f ms p99 %.2f ms max %.2f ms | since last %d cycles p50 %.2f ms p99 %.2f ms "
            "max %.2f ms | deadline misses %d invalid %d stale %d inference errors %d write rejected %d | "
            "reconnects %d",
            c.cycles,
            s["p50"],
            s["p99"],
            s["max"],
            window.count,
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
        self.latencies.window = LatencyHistogram()
        self.hooks.on_stats(self.summary())

    def disconnected_s(self) -> float:
        """Seconds without a session after a loss, the outage under way included."""
        started = self.link.outage_started
        ongoing = 0.0 if started is None else time.monotonic() - started
        return self.counters.disconnected_s + ongoing

    def summary(self) -> dict[str, Any]:
        """The run's summary (the file `serve --summary` writes), from a full snapshot."""
        return summary_of(self.snapshot(full=True))


def _figures(h: LatencyHistogram) -> LatencyFigures:
    s = h.summary()
    return LatencyFigures(p50=s["p50"], p99=s["p99"], p99_9=s["p99.9"], max=s["max"], mean=s["mean"])


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep, waking early on stop; True if stopped."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
        return True
    except (TimeoutError, asyncio.TimeoutError):  # distinct before 3.11
        return False
