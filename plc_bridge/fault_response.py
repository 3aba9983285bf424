"""What the loop writes on a fault, per fault class, as the node map chooses (PLC practice: OPC UA Part 15's
substitute values, PLCopen's jerk-limited motion blocks):

- `safe`: the safe action at once (the behaviour before fault responses existed);
- `hold`: the last action written, repeated for at most `hold_ms` of the fault, then the safe action (a
  vehicle that misses one cycle keeps its speed instead of braking hard for 20 ms);
- `ramp`: from the last action written toward the safe action at most `ramp_rate` action units per second
  per component (Box actions), then the safe action held.

A healthy cycle ends the fault: the policy's action goes out again. The status code tells the PLC which:
the fault's code (plc_bridge.status.CycleStatus) plus HELD (16) while the last action is held, or RAMPING
(32) while the action is on its way to the safe one. `FaultResponder` is the one place that decides it, for
serve's loop and for `evaluate --inject-faults`, which replays the same rules on the plant's clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, short_repr
from rl2edge.plc_bridge.status import CycleStatus

RESPONSES = ("safe", "hold", "ramp")
HELD, RAMPING = 16, 32
"""Added to the fault's status code while its response holds or ramps."""
FAULT_CLASSES: Mapping[str, CycleStatus] = {
    "deadline_miss": CycleStatus.DEADLINE_MISS,
    "invalid": CycleStatus.INVALID_OBSERVATION,
    "stale": CycleStatus.STALE,
    "inference_error": CycleStatus.INFERENCE_ERROR,
}
DEFAULT_HOLD_MS = 100.0
MAX_FAULT_RESPONSE_MS = 60_000.0
"""The longest a fault may be answered with anything but the safe action: hold_ms's cap, and the time a
ramp has to reach the safe action from anywhere in the action range."""
"""Five cycles at serve's default 20 ms period: long enough to ride through a late cycle or two, short
enough that a plant stopped by a real fault gets the safe action within 0.1 s."""


@dataclass(frozen=True)
class FaultResponses:
    """The node map's choice: a response per fault class, `hold_ms`, and `ramp_rate` (per component)."""

    by_class: Mapping[str, str] = field(default_factory=dict)
    """Fault classes the map names; the others get `default_for` of the action type."""
    hold_ms: float = DEFAULT_HOLD_MS
    ramp_rate: tuple[float, ...] | None = None

    def response(self, fault: str, discrete: bool) -> str:
        return self.by_class.get(fault) or default_for(fault, discrete)


def default_for(fault: str, discrete: bool) -> str:
    """Box actions hold through a deadline miss (the loop is late, the plant is fine); every other fault,
    and every fault of an integer action, Discrete or MultiDiscrete (a held index may be a wrong one),
    gets the safe action."""
    return "hold" if fault == "deadline_miss" and not discrete else "safe"


def parse_fault_responses(data: Mapping[str, Any], where: str) -> FaultResponses:
    """The node map's `fault_response:` ({class: response}), `hold_ms:` and `ramp_rate:`."""
    raw = data.get("fault_response") or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where}: fault_response must map fault classes to responses, e.g. {{deadline_miss: hold}}"
        )
    by_class: dict[str, str] = {}
    for fault, response in raw.items():
        if fault not in FAULT_CLASSES:
            raise ConfigError(
                f"{where}: fault_response names {short_repr(fault)}; the fault classes are {', '.join(FAULT_CLASSES)}"
            )
        if response not in RESPONSES:
            raise ConfigError(
                f"{where}: fault_response.{fault} is {short_repr(response)}; choose {', '.join(RESPONSES)}"
            )
        by_class[fault] = response
    hold_ms = data.get("hold_ms", DEFAULT_HOLD_MS)
    if (
        isinstance(hold_ms, bool)
        or not isinstance(hold_ms, int | float)
        or not 0 < hold_ms <= MAX_FAULT_RESPONSE_MS
    ):
        raise ConfigError(
            f"{where}: hold_ms must be a time from above 0 to {MAX_FAULT_RESPONSE_MS:g} ms, got {short_repr(hold_ms)}"
        )
    rate = data.get("ramp_rate")
    ramp_rate: tuple[float, ...] | None = None
    if rate is not None:
        values = rate if isinstance(rate, list) else [rate]
        if not values or any(
            isinstance(v, bool) or not isinstance(v, int | float) or not (v > 0 and math.isfinite(v))
            for v in values
        ):
            raise ConfigError(
                f"{where}: ramp_rate must be a finite positive number or a list of them (action units per second), got "
                f"{short_repr(rate)}"
            )
        ramp_rate = tuple(float(v) for v in values)
    if "ramp" in by_class.values() and ramp_rate is None:
        raise ConfigError(
            f"{where}: a ramp response needs ramp_rate (action units per second, per component)"
        )
    return FaultResponses(by_class, float(hold_ms), ramp_rate)


class FaultResponder:
    """Decides what goes out on each cycle from its status, the policy's action and the time (monotonic
    seconds: the loop's clock, or the plant's in `evaluate --inject-faults`)."""

    def __init__(
        self,
        responses: FaultResponses,
        safe_action: Sequence[float],
        discrete: bool,
        action_span: Sequence[float] | np.ndarray | None = None,
    ):
        """`action_span`: each Box component's high - low; with it a ramp too slow to cross the range
        within MAX_FAULT_RESPONSE_MS is refused (without it, the ramp still ends there)."""
        self.safe = np.asarray(safe_action, np.float64)
        self.discrete = discrete
        self.by_status = {code: responses.response(name, discrete) for name, code in FAULT_CLASSES.items()}
        self.hold_s = responses.hold_ms / 1e3
        self.rate: np.ndarray | None = None
        if discrete and "ramp" in self.by_status.values():
            raise ConfigError(
                "a ramp response needs Box actions; a Discrete or MultiDiscrete action can hold or go safe"
            )
        if responses.ramp_rate is not None and not discrete:
            rate = np.asarray(responses.ramp_rate, np.float64)
            if rate.size not in (1, self.safe.size):
                raise ConfigError(
                    f"ramp_rate has {rate.size} values; the action has {self.safe.size} components (or give one)"
                )
            self.rate = np.broadcast_to(rate, self.safe.shape).copy()
            if action_span is not None:
                need = np.asarray(action_span, np.float64) / (MAX_FAULT_RESPONSE_MS / 1e3)
                slow = np.flatnonzero(np.isfinite(need) & (self.rate < need))
                if slow.size:
                    i = int(slow[0])
                    raise ConfigError(
                        f"ramp_rate {self.rate[i]:g} units/s for action component {i} crosses its range of "
                        f"{float(np.asarray(action_span).reshape(-1)[i]):g} in more than "
                        f"{MAX_FAULT_RESPONSE_MS / 1e3:g} s (the hold cap); give at least {need[i]:.4g} units/s"
                    )
        self.last: np.ndarray | None = None
        """The action last written (None: nothing known, e.g. after a reconnect)."""
        self.fault_since: float | None = None
        self._last_t: float | None = None

    @property
    def responses(self) -> dict[str, str]:
        return {name: self.by_status[code] for name, code in FAULT_CLASSES.items()}

    def describe(self, status: CycleStatus) -> str:
        """What this fault gets, as the log says it."""
        response = self.by_status.get(status, "safe")
        if response == "hold":
            return f"holding the last action for up to {self.hold_s * 1e3:g} ms, then the safe action"
        if response == "ramp" and self.rate is not None:
            return f"ramping to the safe action at {self.rate.tolist()} units/s"
        return "writing the safe action"

    def forget(self) -> None:
        """Nothing is known of what the PLC holds (a reconnect's STARTUP wrote the safe action)."""
        self.last, self.fault_since, self._last_t = None, None, None

    def adopt(self, other: FaultResponder) -> None:
        """Continue another policy's record of what was written (a policy swap is no new session)."""
        self.last, self.fault_since, self._last_t = other.last, other.fault_since, other._last_t

    def respond(
        self, status: CycleStatus, action: Sequence[float], now: float, fault_began: float | None = None
    ) -> tuple[list[float], int]:
        """(the action to write, the status code to write) for this cycle. `fault_began`: when this cycle's
        fault began, if earlier than `now` (a deadline miss begins at the deadline, not when the late reply
        arrives): a hold never outlasts `hold_ms` of the fault."""
        if status == CycleStatus.OK:
            self.last, self.fault_since, self._last_t = np.asarray(action, np.float64), None, now
            return list(action), int(status)
        response = self.by_status.get(status)
        if (
            response is None
        ):  # startup, shutdown, a refused write: the safe action, and nothing is known after
            self.last, self.fault_since, self._last_t = None, None, now
            return self.safe.tolist(), int(status)
        if self.fault_since is None:
            self.fault_since = now if fault_began is None else min(now, fault_began)
        out, code = self.safe, int(status)
        if self.last is not None:
            if response == "hold" and now - self.fault_since <= self.hold_s:
                out, code = self.last, int(status) + HELD
            elif (  # a ramp never outlasts the cap: the safe action from there on
                response == "ramp"
                and self.rate is not None
                and now - self.fault_since <= MAX_FAULT_RESPONSE_MS / 1e3
            ):
                dt = max(0.0, now - (self._last_t if self._last_t is not None else now))
                step = self.rate * dt
                out = self.last + np.clip(self.safe - self.last, -step, step)
                if not np.array_equal(out, self.safe):
                    code = int(status) + RAMPING
        self.last, self._last_t = out, now
        return out.tolist(), code
