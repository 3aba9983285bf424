"""What runs beside the control loop plugs into it through one object given to `ControlLoop` at
construction: `LoopHooks`. The policy updates (plc_bridge.policy_update) and the service that adds the
metrics and the summary file (plc_bridge.service) implement it; neither is imported by the loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rl2edge.plc_bridge.observation_guard import Serving
from rl2edge.plc_bridge.snapshot import DriftState, UpdateState
from rl2edge.plc_bridge.status import CycleStatus


@dataclass(frozen=True)
class CycleOutcome:
    """One completed cycle, as the hooks see it after its write."""

    status: CycleStatus
    observation: Any
    """As read from the PLC; None when its quality was bad."""
    action: list[float]
    """What was written: the policy's action, or the safe one."""
    sequence: Any
    """The PLC's sequence number read (None when its quality was bad)."""
    latency_ms: float
    lateness_ms: float
    """How late the cycle started (part of the latency)."""
    cycles: int
    """Cycles completed so far, this one included."""
    episode_start: bool = False
    """The PLC flagged this observation as an episode's first (the node map's episode_start)."""
    predicted: bool = False
    """The policy was called on this observation (its state, if any, advanced): not a fault before
    inference, nor a re-read of a plant step already decided."""
    state_reset: bool = False
    """The policy's state started afresh before this cycle's call (plc_bridge.policy_state's rules)."""


class LoopHooks(Protocol):
    def before_cycle(self, cycles: int) -> Serving | None:
        """At the start of a cycle (`cycles` completed so far): a verified policy to serve from this cycle
        on, or None."""
        ...

    def after_cycle(self, outcome: CycleOutcome) -> None:
        """After a cycle's write and its bookkeeping: costs no cycle its latency."""
        ...

    def on_stats(self, summary: dict[str, Any]) -> None:
        """At every stats interval, with the summary so far."""
        ...

    def update_state(self) -> UpdateState | None:
        """What the snapshots show of policy updates (None: none run)."""
        ...

    def update_summary(self) -> dict[str, Any] | None:
        """The summary's `policy` section (None: none run)."""
        ...

    def drift_state(self) -> DriftState | None:
        """The observation drift monitor's figures (None: none runs)."""
        ...

    def record_state(self) -> Mapping[str, Any] | None:
        """The flight recorder's counts (plc_bridge.recorder.FlightRecorder.stats; None: none runs)."""
        ...


class NoHooks:
    """The loop alone: no policy updates, no metrics, no summary file."""

    def before_cycle(self, cycles: int) -> Serving | None:
        return None

    def after_cycle(self, outcome: CycleOutcome) -> None:
        return None

    def on_stats(self, summary: dict[str, Any]) -> None:
        return None

    def update_state(self) -> UpdateState | None:
        return None

    def update_summary(self) -> dict[str, Any] | None:
        return None

    def drift_state(self) -> DriftState | None:
        return None

    def record_state(self) -> Mapping[str, Any] | None:
        return None
