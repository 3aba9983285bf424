"""What makes the control loop write the safe action instead of the policy's: the observation guard
(numeric, the policy's number of values, finite, inside the bounds with their tolerance, a sequence number
that moves) and the safe action itself, and what serving a policy takes (`Serving`, `prepare_serving`).

The bounds are the node map's `obs_low`/`obs_high` where given, else the artifact's observation spec;
an unbounded side (None, or no bounds at all) is not checked. The guard works on the flat vector (a Dict
artifact's keys concatenated in manifest order); its messages name a Dict artifact's values by key and
index within the key (`lidar[3]`), a Box artifact's by index (`observation[3]`).
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, short_repr
from rl2edge.plc_bridge.binding import PlantIo, plant_io_of
from rl2edge.plc_bridge.fault_response import FaultResponder
from rl2edge.plc_bridge.nodemap import NodeMap, observation_groups
from rl2edge.runtime.policy import Policy
from rl2edge.specs import ObservationSpec

_FLOAT32_MAX = float(np.finfo(np.float32).max)


class StaleClock:
    """Staleness in the plant's time: the data is stale once the PLC's sequence number has not changed for
    longer than the limit. The limit is the map's `stale_ms`, or else 5x the PLC's publishing interval as
    observed, at least 100 ms, and 2,000 ms until 4 intervals have been seen. The interval is the larger
    of the median of the last 32 intervals between changes and the median of the last 3: a plant that
    slows down (20 ms to 500 ms steps) moves the limit with its second slow step, where the long window
    alone lagged 17 steps (8.5 s of STALE on a healthy plant); one long interval alone (a stall that
    ended) does not move it, so the next stall is flagged as soon as the one before; a plant that speeds
    up gets the shorter limit once the long window's median follows (17 of its faster steps). A plant slower than the loop is never stale for
    being slow, and a plant that stops publishing is flagged one limit after its last change. A map that
    states `stale_cycles` keeps the older rule: that many loop cycles without a change."""

    INTERVALS, MULTIPLE, FLOOR_MS, INITIAL_MS, WINDOW, RECENT = 4, 5.0, 100.0, 2000.0, 32, 3

    def __init__(self, stale_ms: float | None, stale_cycles: int | None):
        self.stale_ms, self.stale_cycles = stale_ms, stale_cycles
        self._last_seq: Any = None
        self._changed_at: float | None = None
        self._unchanged = 0
        self._intervals: deque[float] = deque(maxlen=self.WINDOW)

    @property
    def rule(self) -> str:
        """The rule in force, as the start-up log and the summary state it."""
        if self.stale_cycles is not None:
            return f"{self.stale_cycles} cycles (the map's stale_cycles)"
        if self.stale_ms is not None:
            return f"{self.stale_ms:g} ms (the map's stale_ms)"
        return f"{self.limit_ms():.0f} ms ({self.MULTIPLE:g}x the observed publishing interval)"

    def limit_ms(self) -> float:
        if self.stale_ms is not None:
            return self.stale_ms
        if len(self._intervals) < self.INTERVALS:
            return self.INITIAL_MS
        recent = statistics.median(itertools.islice(reversed(self._intervals), self.RECENT))
        return max(self.FLOOR_MS, self.MULTIPLE * 1000.0 * max(statistics.median(self._intervals), recent))

    def is_stale(self, seq: Any, now: float) -> tuple[bool, str]:
        """Count `seq`, read at `now` (monotonic seconds), in: (stale, why)."""
        if seq != self._last_seq or self._changed_at is None:
            if self._changed_at is not None:
                self._intervals.append(now - self._changed_at)
            self._last_seq, self._changed_at, self._unchanged = seq, now, 0
            return False, ""
        self._unchanged += 1
        if self.stale_cycles is not None:
            stale = self._unchanged >= self.stale_cycles
            return stale, f"sequence number {seq} unchanged for {self._unchanged} cycles" if stale else ""
        age_ms, limit = 1000.0 * (now - self._changed_at), self.limit_ms()
        if age_ms <= limit:
            return False, ""
        return True, f"sequence number {seq} unchanged for {age_ms:.0f} ms (stale after {limit:.0f} ms)"

    def reset(self) -> None:
        """A new session (reconnect): nothing seen yet; the observed interval is the plant's and stays."""
        self._last_seq, self._changed_at, self._unchanged = None, None, 0

    def adopt(self, other: StaleClock) -> None:
        """Continue another clock (a policy swap is no new session)."""
        self._last_seq, self._changed_at, self._unchanged = (
            other._last_seq,
            other._changed_at,
            other._unchanged,
        )
        self._intervals = deque(other._intervals, maxlen=self.WINDOW)


class ObservationGuard:
    """Validation and staleness of the observations read from the PLC, for one policy."""

    def __init__(self, policy: Policy, node_map: NodeMap):
        m = node_map
        spec = policy.observation_spec
        # a per-key map that does not name the artifact's keys: refused before any connect
        observation_groups(m, [k.name for k in spec.keys])
        self.dim = spec.size
        spec_low, spec_high = spec.bounds
        low = m.obs_low if m.obs_low is not None else spec_low
        high = m.obs_high if m.obs_high is not None else spec_high
        if len(low) != self.dim or len(high) != self.dim:
            raise ConfigError(
                f"observation bounds have {len(low)}/{len(high)} entries; the artifact's observation has {self.dim}"
            )
        lo = np.array([-np.inf if v is None else v for v in low], np.float64)
        hi = np.array([np.inf if v is None else v for v in high], np.float64)
        both = np.isfinite(lo) & np.isfinite(hi)
        width = np.where(both, hi - lo, np.maximum(1.0, np.abs(np.where(np.isfinite(lo), lo, hi))))
        self.tolerance = m.obs_range_tolerance * np.where(np.isfinite(width), width, 0.0)
        self.declared_lo, self.declared_hi = lo, hi
        self.lo, self.hi = lo - self.tolerance, hi + self.tolerance
        self._labels = _labels(spec)
        self.staleness = StaleClock(m.stale_ms, m.stale_cycles)

    def check(self, values: Any) -> tuple[np.ndarray | None, str]:
        """(the observation as float64, "") or (None, what is wrong with it)."""
        try:
            obs = np.asarray(values, np.float64).reshape(-1)
        except (TypeError, ValueError):
            return None, f"observation is not numeric: {values!r:.80}"
        if obs.size != self.dim:
            return None, f"observation has {obs.size} values, the policy takes {self.dim}"
        finite = np.isfinite(obs)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            return None, f"observation contains NaN or Inf: {self.label(i)} = {obs[i]:g}"
        # finite here, Inf in the model's float32: bad data, not the model's fault
        huge = np.abs(obs) > _FLOAT32_MAX
        if huge.any():
            i = int(np.flatnonzero(huge)[0])
            return None, f"{self.label(i)} = {obs[i]:g} is beyond float32's range (the model's input type)"
        out = (obs < self.lo) | (obs > self.hi)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            return None, self._out_of_bounds(i, float(obs[i]))
        return obs, ""

    def label(self, i: int) -> str:
        """What messages call value `i` of the flat observation: `lidar[3]`, or `observation[3]` for a Box."""
        return self._labels[i] if self._labels else f"observation[{i}]"

    def _out_of_bounds(self, i: int, value: float) -> str:
        above = value > self.hi[i]
        side, bound = (
            ("above its high", self.declared_hi[i]) if above else ("below its low", self.declared_lo[i])
        )
        tolerance = " with the tolerance" if self.tolerance[i] > 0 else ""
        return (
            f"{self.label(i)} = {value:g} is {side} {bound:g} "
            f"(outside [{self.lo[i]:g}, {self.hi[i]:g}]{tolerance})"
        )

    def is_stale(self, seq: Any, now: float) -> tuple[bool, str]:
        """Count `seq`, read at `now` (monotonic seconds), in: (stale, why); see StaleClock."""
        return self.staleness.is_stale(seq, now)

    def reset(self) -> None:
        self.staleness.reset()

    def adopt_staleness(self, other: ObservationGuard) -> None:
        """Continue another guard's staleness (a policy swap is no new session)."""
        self.staleness.adopt(other.staleness)


def _labels(spec: ObservationSpec) -> list[str]:
    """A Dict observation's value names, key and index within the key, in the concatenation's order."""
    labels = []
    for k in spec.keys:
        if k.is_image:  # a pixel: camera[row, column, channel] in the key's own layout
            labels += [f"{k.name}[{', '.join(map(str, ix))}]" for ix in np.ndindex(*k.shape)]
        else:
            labels += [f"{k.name}[{j}]" for j in range(k.size)]
    return labels


def action_span(policy: Policy) -> np.ndarray | None:
    """Each Box action component's high - low (what a ramp must cross); None for integer actions."""
    return None if policy.categorical else (policy.action_high - policy.action_low).reshape(-1)


def resolve_safe_action(policy: Policy, configured: tuple[float, ...] | None) -> list[float]:
    """The node map's safe action checked against the policy's action spec, or the default: the first
    index of a Discrete action (of each component of a MultiDiscrete one), zero clipped into the bounds of a
    Box one."""
    act = policy.action_spec
    if act.multi_discrete:
        first, last = act.index_bounds
        if configured is None:
            return first.astype(np.float64).tolist()
        safe = np.asarray(configured, np.float64)
        outside = np.any(safe < first) or np.any(safe > last) if safe.shape == first.shape else True
        if outside or np.any(safe != np.rint(safe)):
            raise ConfigError(
                f"safe_action {short_repr(list(configured))} must be {first.size} action indices, one per "
                f"component, each inside [{short_repr(first.tolist())}, {short_repr(last.tolist())}]"
            )
        return safe.tolist()
    if act.discrete:
        lo, hi = act.index_range
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
            f"safe_action {short_repr(list(configured))} must have {low.size} values inside "
            f"[{short_repr(low.tolist())}, {short_repr(high.tolist())}]"
        )
    return safe.tolist()


def check_state_rule(policy: Policy, node_map: NodeMap) -> None:
    """A stateful artifact needs a rule for the plant's episodes: the node that flags their starts (its state
    resets there, as in `evaluate`), or the map's word that the state runs on across them. Without either,
    served returns would silently differ from evaluated ones: refused, at start and for an update."""
    if not policy.states or node_map.episode_start is not None or node_map.state_across_episodes:
        return
    names = ", ".join(policy.state())
    raise ConfigError(
        f"the artifact carries state ({names}) and the node map names no episode_start node: add "
        "episode_start: <the Boolean the PLC sets with each episode's first observation> to the map, or, "
        "for a plant without episodes, state_across_episodes: true (serve --allow-state-across-episodes)"
    )


@dataclass(frozen=True)
class Serving:
    """A policy with what the loop needs to serve it."""

    policy: Policy
    guard: ObservationGuard
    safe_action: list[float]
    faults: FaultResponder

    @classmethod
    def of(cls, policy: Policy, node_map: NodeMap) -> Serving:
        """The guard, safe action and fault responses of `policy` under `node_map` (ConfigError if they do
        not fit it)."""
        check_state_rule(policy, node_map)
        safe = resolve_safe_action(policy, node_map.safe_action)
        faults = FaultResponder(node_map.fault_responses, safe, policy.categorical, action_span(policy))
        return cls(policy, ObservationGuard(policy, node_map), safe, faults)


def prepare_serving(candidate: Policy, serving: Policy, node_map: NodeMap) -> Serving:
    """What serving `candidate` in place of `serving` takes, or a ConfigError saying why it does not fit:
    the node map and the PLC's nodes were checked against the serving policy's specs."""
    if candidate.obs_shape != serving.obs_shape:
        raise ConfigError(
            f"its observation has shape {list(candidate.obs_shape)}, the serving policy's "
            f"{list(serving.obs_shape)}"
        )
    io, serving_io = plant_io_of(candidate), plant_io_of(serving)
    if io.obs_keys != serving_io.obs_keys:  # the same length, other values in its places
        raise ConfigError(
            f"its observation keys {_keys_text(io)} are not the serving policy's {_keys_text(serving_io)}"
        )
    if io != serving_io:
        raise ConfigError(
            f"its action spec {_io_text(io)} is not the serving policy's {_io_text(serving_io)}"
        )
    return Serving.of(candidate, node_map)


def _keys_text(io: PlantIo) -> str:
    return "(none: a Box)" if not io.obs_keys else ", ".join(f"{k}[{n}]" for k, n in io.obs_keys)


def _io_text(io: PlantIo) -> str:
    if io.discrete:
        return f"Discrete({int(io.action_high[0] - io.action_low[0]) + 1})"
    if io.integer:
        return (
            f"MultiDiscrete(first={[int(v) for v in io.action_low]}, last={[int(v) for v in io.action_high]})"
        )
    return f"Box(low={list(io.action_low)}, high={list(io.action_high)})"
