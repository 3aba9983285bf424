"""The control loop's mutable state, in small groups (plc_bridge.loop.ControlLoop holds one of each): the
counts, the latency histograms, the link with the PLC, the current cycle's bookkeeping, the run's clock.
What others read of it is the frozen `ControlLoop.snapshot()` (plc_bridge.snapshot), never these."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.status import CycleStatus


@dataclass
class Counters:
    cycles: int = 0
    ok: int = 0
    invalid: int = 0
    stale: int = 0
    deadline_misses: int = 0
    inference_errors: int = 0
    write_rejected: int = 0
    held: int = 0
    """Fault cycles that wrote the last action again (the map's `hold` response)."""
    ramped: int = 0
    """Fault cycles that wrote a step of the ramp toward the safe action (`ramp`)."""
    bad_quality: int = 0
    """Part of `invalid`: cycles whose observation or sequence number the PLC marked Bad or Uncertain."""
    skipped_slots: int = 0
    reconnects: int = 0
    connection_losses: int = 0
    disconnected_s: float = 0.0
    state_resets: int = 0
    """A stateful policy's resets by serve's rules (connect, reconnect, after STALE), not the episodes'."""


@dataclass
class Latencies:
    """The loop's latency histograms (fixed memory, any run length)."""

    total: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Every cycle's: from its scheduled start to the end of its last write."""
    window: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Since the last stats line: a soak sees drift, not a run-long blur."""
    lateness: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Scheduled start -> actual start: the timer's share of the latency."""


@dataclass
class Link:
    """The session with the PLC as the loop sees it: what the health checks and the backoff go by."""

    backoff_s: float
    """Grows with every failed connect or lost session; back to the start only once a cycle completes."""
    connected: bool = False
    ran: bool = False
    """A cycle has completed: configuration errors are from now on retried, not fatal."""
    progress_at: float = field(default_factory=time.monotonic)
    """When the loop last showed it is alive: a cycle, a counted deadline miss, a connect attempt, a
    backoff wake-up (time.monotonic). /healthz and the systemd watchdog read it."""
    last_cycle_at: float | None = None
    last_status: CycleStatus | None = None
    """The status of the last completed cycle (None before the first)."""
    outage_started: float | None = None
    """When the current outage began (time.monotonic), while reconnecting after a loss."""
    publishing_interval_ms: float | None = None


@dataclass
class CycleState:
    """The current cycle's and the decision's own bookkeeping."""

    phase: str = "read"
    """Where the current cycle waits."""
    missed: bool = False
    """Whether its deadline already passed (counted then)."""
    logged_status: CycleStatus = CycleStatus.OK
    """The status last logged: transitions are logged, not every cycle of a lasting fault."""
    warm_obs: np.ndarray | None = None
    """The last valid observation, for the warm-up in the spin."""
    decision_s: float = 0.0
    """A decaying maximum of how long a decision takes (the cycles' own and the warm-ups): a warm-up runs
    only where twice that is left of the lead, so a model slower than the lead (a CNN on a Jetson) is never
    warmed up into the slot."""


@dataclass
class RunClock:
    started: float = field(default_factory=time.time)
    cpu_started: float = field(default_factory=time.process_time)
    last_stats: float | None = None
