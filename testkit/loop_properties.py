"""Generated plant behaviour for the control loop's property tests (tests/test_loop_properties.py).

One case: a real asyncua server with plc-sim's nodes on a loopback port, the real `ControlLoop` serving an
artifact to it in cyclic mode, and a seeded script of what the plant does before each cycle: observation
values (in range, NaN, +-inf, far out of bounds, subnormal), their quality (Good, Bad, Uncertain), the
sequence number (next, frozen, backwards, wrapping past 2**32 - 1, a jump), the episode-start flag, a
refused write of the action, the model process killed, a policy update taking over.

The script is applied through the loop's own hooks (plc_bridge.hooks.LoopHooks): after each cycle's write
the harness reads back what the loop wrote and sets the next step's values on the server, so every cycle
reads exactly its step, whatever the machine's speed. `check_case` then holds every cycle to the loop's
promises, computing what it expects from the documented rules (docs/serving.md) and a reference `Policy`
of its own, not from the loop's code.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from asyncua import Server, ua

from rl2edge.plc_bridge.binding import plant_io_of
from rl2edge.plc_bridge.client import BridgeConfig
from rl2edge.plc_bridge.fault_response import HELD, RAMPING
from rl2edge.plc_bridge.hooks import CycleOutcome, NoHooks
from rl2edge.plc_bridge.layout import build_plc_nodes
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.nodemap import NodeMap, load_node_map
from rl2edge.plc_bridge.observation_guard import ObservationGuard, Serving
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.policy import Policy
from testkit.plc import free_port

SEQ_MAX = 2**32 - 1
STALE_CYCLES = 4
"""The map's stale rule in cycles, not milliseconds: which cycle is STALE is then a fact of the script."""
PERIOD_MS, DEADLINE_MS = 10.0, 300.0
"""A deadline far past the period: a miss is the machine's noise, never the script's, and is tolerated."""
HOLD_MS = 40.0
ACTION_ATOL = 1e-6
"""OK cycles: the loop's action against the reference `Policy`'s on the same observation. One file, one
interpreter, one thread on both sides: equal in practice; the tolerance only covers a float64 round trip
through the server's Double array."""


@dataclass(frozen=True)
class Step:
    """What the plant does before one cycle."""

    seq: int
    obs: tuple[float, ...]
    quality: str = "good"
    """good, bad or uncertain (the observation node's StatusCode)."""
    episode_start: bool = False
    refuse_write: bool = False
    """The server refuses this cycle's write of the action node (BadUserAccessDenied)."""
    kill_model: bool = False
    """The serving policy's model process is killed (SIGKILL) before this cycle."""
    update: bool = False
    """A policy update takes over at the start of this cycle (the other policy of the case)."""
    kind: str = "in range"
    """What generated the observation: in range, nan, inf, out of bounds, subnormal."""


@dataclass(frozen=True)
class CaseSpec:
    seed: int
    cycles: int
    fault_response: dict[str, str]
    """The node map's fault_response (hold, ramp, safe per class)."""
    ramp_rate: float | None = None
    kills: bool = True
    updates: bool = True


def generate(spec: CaseSpec, guard: ObservationGuard) -> list[Step]:
    """A seeded script of `spec.cycles` steps for a policy whose observation bounds `guard` holds."""
    rng = np.random.default_rng(spec.seed)
    lo, hi = np.asarray(guard.declared_lo, np.float64), np.asarray(guard.declared_hi, np.float64)
    bounded = np.flatnonzero(np.isfinite(lo) & np.isfinite(hi))
    steps: list[Step] = []
    seq, obs, quality, kind = int(rng.integers(0, 1000)), _in_range(rng, lo, hi), "good", "in range"
    flag = True
    for i in range(spec.cycles):
        move = rng.choice(["next", "frozen", "back", "wrap", "jump"], p=[0.62, 0.25, 0.05, 0.03, 0.05])
        if i == 0 or move != "frozen":  # a new plant step: new values, maybe odd ones
            seq = {
                "next": (seq + 1) % (SEQ_MAX + 1),
                "frozen": seq,
                "back": (seq - int(rng.integers(1, 4))) % (SEQ_MAX + 1),
                "wrap": SEQ_MAX if seq != SEQ_MAX else 0,
                "jump": (seq + int(rng.integers(2, SEQ_MAX))) % (SEQ_MAX + 1),
            }[str(move)]  # each a new number: a PLC never publishes a new observation under the old one
            kind = str(rng.choice(["in range", "nan", "inf", "out of bounds", "subnormal"],
                                  p=[0.8, 0.05, 0.05, 0.05 if bounded.size else 0.0,
                                     0.05 if bounded.size else 0.1]))  # fmt: skip
            obs = _odd(kind, rng, lo, hi, bounded)
            quality = str(rng.choice(["good", "bad", "uncertain"], p=[0.9, 0.05, 0.05]))
            flag = bool(rng.random() < 0.08)
        steps.append(
            Step(
                seq=seq,
                obs=tuple(float(v) for v in obs),
                quality=quality,
                episode_start=flag,
                refuse_write=bool(rng.random() < 0.03),
                kill_model=spec.kills and i > 5 and bool(rng.random() < 0.01),
                update=spec.updates and i > 0 and bool(rng.random() < 0.02),
                kind=kind,
            )
        )
    return steps


def _in_range(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    finite = np.isfinite(lo) & np.isfinite(hi)
    out = rng.normal(0.0, 1.0, lo.shape)
    out[finite] = rng.uniform(lo[finite], hi[finite])
    return out


def _odd(
    kind: str, rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray, bounded: np.ndarray
) -> np.ndarray:
    obs = _in_range(rng, lo, hi)
    i = int(rng.integers(0, obs.size))
    if kind == "nan":
        obs[i] = math.nan
    elif kind == "inf":
        obs[i] = math.inf if rng.random() < 0.5 else -math.inf
    elif kind == "out of bounds":  # far outside, never near the tolerance's edge
        j = int(rng.choice(bounded))
        width = hi[j] - lo[j]
        obs[j] = hi[j] + 10 * width if rng.random() < 0.5 else lo[j] - 10 * width
    elif kind == "subnormal":
        j = int(rng.choice(bounded)) if bounded.size else i
        obs[j] = 5e-324 if rng.random() < 0.5 else -5e-324
    return obs


# ------------------------------------------------------------------------------------------- run
@dataclass
class Cycle:
    """One cycle as seen from outside the loop: its step, the outcome the hooks got, the values read back
    from the server after its write, and when (monotonic seconds, at the hook)."""

    step: Step
    outcome: CycleOutcome
    action: list[float]
    status: int
    action_seq: int
    heartbeat: int
    started: float
    """When its before_cycle hook ran (monotonic seconds): the loop's clock read this cycle is later."""
    at: float
    """When its after_cycle hook ran: the loop's clock read this cycle is earlier. The timing checks use
    these bounds, so they need no slack for a slow machine."""


@dataclass
class CaseRun:
    steps: list[Step]
    cycles: list[Cycle] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    served: list[int] = field(default_factory=list)
    """Which policy (0 or 1) served each cycle."""
    killed: dict[int, int] = field(default_factory=dict)
    """Cycle number -> the policy (0 or 1) whose model process was killed just before it."""
    harness_errors: list[str] = field(default_factory=list)


class _Plant:
    """The server's side: the nodes, the step applied before each cycle, the refused writes."""

    def __init__(self, server: Server, nodes: Any):
        self.server, self.nodes = server, nodes
        self.refusing = False
        service = server.iserver.attribute_service
        write = service.write
        action_id = nodes.action.nodeid

        async def refusing_write(params: ua.WriteParameters, user: Any = None) -> list[ua.StatusCode]:
            refused = [self.refusing and wv.NodeId == action_id for wv in params.NodesToWrite]
            passed = ua.WriteParameters()
            passed.NodesToWrite = [
                wv for wv, bad in zip(params.NodesToWrite, refused, strict=True) if not bad
            ]
            results = iter(
                await (write(passed) if user is None else write(passed, user=user))
                if passed.NodesToWrite
                else []
            )
            return [
                ua.StatusCode(ua.StatusCodes.BadUserAccessDenied) if bad else next(results) for bad in refused
            ]

        service.write = refusing_write

    def apply(self, step: Step) -> None:
        """The step's values, set in the server's address space now (between two cycles, synchronously: a
        late loop that starts its next cycle at once still reads them)."""
        n = self.nodes
        code = {"good": ua.StatusCodes.Good, "bad": ua.StatusCodes.BadSensorFailure,
                "uncertain": ua.StatusCodes.UncertainLastUsableValue}[step.quality]  # fmt: skip
        obs = ua.Variant(list(step.obs), ua.VariantType.Double)
        self._set(n.observation, ua.DataValue(obs, StatusCode=ua.StatusCode(code)))
        self._set(n.episode_start, ua.DataValue(ua.Variant(step.episode_start, ua.VariantType.Boolean)))
        self._set(n.observation_seq, ua.DataValue(ua.Variant(step.seq, ua.VariantType.UInt32)))
        self.refusing = step.refuse_write

    def _set(self, node: Any, value: ua.DataValue) -> None:
        """asyncua's address-space write, run to its end here: it awaits only data-change callbacks, and
        the cyclic loop subscribes to none, so it never suspends (checked)."""
        coro = self.server.iserver.aspace.write_attribute_value(node.nodeid, ua.AttributeIds.Value, value)
        try:
            coro.send(None)
        except StopIteration as done:
            if not done.value.is_good():
                raise AssertionError(f"setting {node.nodeid}: {done.value}") from None
            return
        coro.close()
        raise AssertionError(f"setting {node.nodeid} suspended: a subscription's callback?")

    def read(self, node: Any) -> Any:
        return self.server.iserver.aspace.read_attribute_value(node.nodeid, ua.AttributeIds.Value).Value.Value


class _Script(NoHooks):
    """The loop's hooks: the policy updates the script asks for, and the step applied after each write."""

    def __init__(self, run: CaseRun, plant: _Plant, servings: list[Serving]):
        self.run, self.plant, self.servings = run, plant, servings
        self.serving_index = 0
        self.started = 0.0

    def before_cycle(self, cycles: int) -> Serving | None:
        self.started = time.monotonic()
        step = self.run.steps[cycles]
        if step.update:
            self.serving_index = 1 - self.serving_index
            self.run.served.append(self.serving_index)
            return self.servings[self.serving_index]
        self.run.served.append(self.serving_index)
        return None

    def after_cycle(self, outcome: CycleOutcome) -> None:
        k = outcome.cycles  # this cycle's number, from 1
        p, n = self.plant, self.plant.nodes
        self.run.cycles.append(
            Cycle(
                step=self.run.steps[k - 1],
                outcome=outcome,
                action=list(np.atleast_1d(np.asarray(p.read(n.action), np.float64))),
                status=int(p.read(n.status)),
                action_seq=int(p.read(n.action_seq)),
                heartbeat=int(p.read(n.heartbeat)),
                started=self.started,
                at=time.monotonic(),
            )
        )
        if k < len(self.run.steps):
            nxt = self.run.steps[k]
            if nxt.kill_model:
                _kill_model_process(self.servings[self.serving_index].policy)
                self.run.killed[k + 1] = self.serving_index
            p.apply(nxt)


def _kill_model_process(policy: Policy) -> None:
    child = getattr(policy.backend, "_child", None)
    if child is not None and child.proc.poll() is None:  # else dead already, or restarting
        os.kill(child.proc.pid, signal.SIGKILL)
        child.proc.wait(timeout=5)


def node_map_file(directory: Path, spec: CaseSpec) -> Path:
    from testkit.plc import episode_start_map

    data = yaml.safe_load(episode_start_map(directory).read_text())
    data.update(stale_cycles=STALE_CYCLES, hold_ms=HOLD_MS, fault_response=spec.fault_response)
    if spec.ramp_rate is not None:
        data["ramp_rate"] = spec.ramp_rate
    path = directory / f"map_{spec.seed}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def run_case(spec: CaseSpec, artifacts: tuple[Path, Path], directory: Path) -> tuple[CaseRun, NodeMap]:
    """Serve artifacts[0] (artifacts[1] is what updates swap in, and back) over the generated script."""
    node_map = load_node_map(node_map_file(directory, spec))
    policies = [Policy.load(a, isolate=True, call_timeout_s=1.0) for a in artifacts]
    try:
        servings = [Serving.of(p, node_map) for p in policies]
        steps = generate(spec, servings[0].guard)
        run = CaseRun(steps)
        url = f"opc.tcp://127.0.0.1:{free_port()}"
        server = Server()
        await server.init()
        server.set_endpoint(url)
        p0 = policies[0]
        io = plant_io_of(p0)
        nodes = await build_plc_nodes(server, io.obs_size, io.action_size)
        plant = _Plant(server, nodes)
        plant.apply(steps[0])
        async with server:
            loop = ControlLoop(
                p0,
                BridgeConfig(url, node_map=node_map, request_timeout_s=2.0),
                LoopConfig(
                    period_ms=PERIOD_MS,
                    deadline_ms=DEADLINE_MS,
                    max_cycles=spec.cycles,
                    stats_interval_s=3600,
                ),
                hooks=_Script(run, plant, servings),
            )
            run.summary = await asyncio.wait_for(loop.run(asyncio.Event()), 120)
        return run, node_map
    finally:
        for p in policies:
            p.close()


# ----------------------------------------------------------------------------------------- check
@dataclass
class Verdict:
    checked: int = 0
    """Cycles whose status and written values were checked."""
    ok_compared: int = 0
    """OK cycles whose action was compared with the reference policy's."""
    noise_misses: int = 0
    """Deadline misses the script did not ask for (the machine's noise): their fault response is checked,
    and a stateful reference cannot know whether the late call advanced its state: exact comparisons
    resume at the next reset."""
    statuses: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


_CODES = {int(x) for x in CycleStatus}

_FAULT_CLASS = {
    CycleStatus.INVALID_OBSERVATION: "invalid",
    CycleStatus.STALE: "stale",
    CycleStatus.DEADLINE_MISS: "deadline_miss",
    CycleStatus.INFERENCE_ERROR: "inference_error",
}


def check_case(run: CaseRun, node_map: NodeMap, artifacts: tuple[Path, Path]) -> Verdict:
    """Every cycle against the loop's promises; violations are collected, not raised, so that a failing
    case reports all it broke."""
    refs = [Policy.load(a) for a in artifacts]  # in this process: the reference answers
    serving = [Serving.of(r, node_map) for r in refs]
    v = Verdict()
    bad = v.violations.append
    sure = True  # the reference's state is known to be the loop's
    reset_due = True  # connect
    episode_due = False
    last_seq: Any = None
    unchanged = 0
    served_seq: Any = None  # the step whose decision stands (None: none since the last reset)
    decided: list[float] | None = None
    down = [False, False]  # a policy's model process was killed and has not answered since
    prev: Cycle | None = None
    spell: Cycle | None = None  # the current fault spell's first cycle (None: in healthy operation)
    last_written: list[float] | None = None
    heartbeat = -1
    for k, (c, who) in enumerate(zip(run.cycles, run.served, strict=False), 1):
        s, out = c.step, c.outcome
        ref, srv = refs[who], serving[who]
        where = f"cycle {k} ({s.kind}, {s.quality}, seq {s.seq}, flag {s.episode_start})"
        v.checked += 1
        v.kinds[s.kind] = v.kinds.get(s.kind, 0) + 1
        actual = CycleStatus(out.status)
        v.statuses[actual.name] = v.statuses.get(actual.name, 0) + 1
        if s.update:
            reset_due, served_seq, decided, sure = True, None, None, True
        if k in run.killed:
            down[run.killed[k]] = True
        # --- what the documented rules expect
        new = s.seq != last_seq
        unchanged = 0 if new else unchanged + 1
        last_seq = s.seq
        if s.episode_start and not (served_seq is not None and not new):
            episode_due = True
        obs = np.asarray(s.obs, np.float64)
        valid = s.quality == "good" and srv.guard.check(obs)[0] is not None
        if s.kind in ("nan", "inf", "out of bounds") and valid:
            bad(f"{where}: the guard took an observation generated as {s.kind}")
        expected_action: list[float] | None = None
        if not valid:
            expected = CycleStatus.INVALID_OBSERVATION
        elif unchanged >= STALE_CYCLES:
            expected = CycleStatus.STALE
            reset_due, served_seq, decided = True, None, None
        elif not new and served_seq is not None:
            expected, expected_action = CycleStatus.OK, decided
        else:
            expected = CycleStatus.OK
        # --- the status
        noise = False  # a deadline miss the script did not ask for (set below)
        stateless = not ref.states.snapshot()
        # a stateful policy's re-read step writes its decision again; a stateless one runs on every cycle
        predicts = expected == CycleStatus.OK and (expected_action is None or stateless)
        if actual == expected:
            pass
        elif actual == CycleStatus.INFERENCE_ERROR and predicts and down[who]:
            pass  # the killed model process, or its restart
        elif actual == CycleStatus.DEADLINE_MISS:
            v.noise_misses += 1
            noise = True
            if predicts:
                sure = ref.states.snapshot() == {}  # did the late call advance the state? unknown
        elif actual == CycleStatus.WRITE_REJECTED and s.refuse_write:
            pass
        else:
            bad(f"{where}: status {actual.name}, the rules say {expected.name}")
        if s.refuse_write and actual != CycleStatus.WRITE_REJECTED:
            bad(f"{where}: the PLC refused the action's write, status {actual.name}")
        # --- the reference steps as the loop must have
        if actual == CycleStatus.WRITE_REJECTED and predicts and down[who]:
            # the status tells a refused write, not whether the call before it answered (the model process
            # down, the state reset after it) or not: exact comparisons resume at the next reset
            served_seq, decided, sure = None, None, False
        elif actual in (CycleStatus.OK, CycleStatus.WRITE_REJECTED) and predicts:
            if reset_due or episode_due:
                ref.reset()
                reset_due = episode_due = False
                sure = True
            answer = ref.predict(obs)
            expected_action = [float(answer)] if ref.discrete else np.asarray(answer, np.float64).tolist()
            served_seq, decided = s.seq, expected_action
            down[who] = False
        elif actual == CycleStatus.INFERENCE_ERROR:
            reset_due, served_seq, decided = True, None, None
        elif actual == CycleStatus.DEADLINE_MISS and predicts:
            served_seq, decided = None, None
            reset_due = reset_due or not sure
        # --- the written values
        if c.heartbeat <= heartbeat:
            bad(f"{where}: heartbeat {c.heartbeat} did not move on from {heartbeat}")
        heartbeat = c.heartbeat
        safe = srv.safe_action
        if actual == CycleStatus.WRITE_REJECTED:
            if c.status != int(actual):
                bad(f"{where}: status node {c.status}, expected {int(actual)}")
            if prev is not None and c.action != prev.action:
                bad(f"{where}: the refused action node changed to {c.action}")
            last_written, spell = None, None
        elif actual == CycleStatus.OK:
            spell = None
            if c.status != 0:
                bad(f"{where}: status node {c.status} on an OK cycle")
            if c.action_seq != s.seq:
                bad(f"{where}: answered {c.action_seq}, the observation's sequence number is {s.seq}")
            if expected_action is not None and (sure or ref.states.snapshot() == {}):
                v.ok_compared += 1
                if not np.allclose(c.action, expected_action, rtol=0, atol=ACTION_ATOL):
                    bad(f"{where}: wrote {c.action}, the policy's answer is {expected_action}")
            last_written = c.action
        else:
            spell = c if spell is None else spell
            named = actual
            written = (
                CycleStatus(c.status & ~(HELD | RAMPING)) if c.status & ~(HELD | RAMPING) in _CODES else None
            )
            if noise and written not in (None, CycleStatus.OK, CycleStatus.DEADLINE_MISS):
                # the deadline passed while the write was under way: the status node carries the fault the
                # cycle had decided before it (an inference error), the summary counts the miss
                named = written
                if written == CycleStatus.INFERENCE_ERROR:
                    reset_due, served_seq, decided = True, None, None
            _check_fault(where, named, c, node_map, srv, safe, last_written, prev, spell, bad)
            last_written = c.action
        prev = c
    # --- the summary
    s = run.summary
    parts = ("ok", "invalid", "stale", "deadline_misses", "inference_errors", "write_rejected")
    if sum(s[p] for p in parts) != s["cycles"]:
        bad(f"summary: {', '.join(f'{p} {s[p]}' for p in parts)} do not add up to {s['cycles']} cycles")
    if s["cycles"] != len(run.cycles) or len(run.cycles) != len(run.steps):
        bad(f"summary: {s['cycles']} cycles, {len(run.cycles)} seen, {len(run.steps)} in the script")
    for name in ("OK", "INVALID_OBSERVATION", "STALE", "INFERENCE_ERROR", "WRITE_REJECTED"):
        key = {"OK": "ok", "INVALID_OBSERVATION": "invalid", "STALE": "stale",
               "INFERENCE_ERROR": "inference_errors", "WRITE_REJECTED": "write_rejected"}[name]  # fmt: skip
        if s[key] != v.statuses.get(name, 0):
            bad(f"summary: {key} {s[key]}, the cycles' statuses {v.statuses.get(name, 0)}")
    v.violations.extend(run.harness_errors)
    for r in refs:
        r.close()
    return v


def _check_fault(
    where: str,
    status: CycleStatus,
    c: Cycle,
    node_map: NodeMap,
    srv: Serving,
    safe: list[float],
    last: list[float] | None,
    prev: Cycle | None,
    spell: Cycle,
    bad: Any,
) -> None:
    """A fault cycle: the map's response for its class, with the status code naming it. The hold's
    length and the ramp's steps are bounded with the hooks' times around the loop's own clock readings."""
    response = node_map.fault_responses.response(_FAULT_CLASS[status], srv.policy.discrete) if (
        status in _FAULT_CLASS) else "safe"  # fmt: skip
    code, base = c.status, int(status)
    if code not in (base, base + HELD, base + RAMPING):
        bad(f"{where}: status node {code} does not name {status.name} ({base})")
        return
    hold_s = HOLD_MS / 1e3
    if code == base:
        if not np.allclose(c.action, safe, rtol=0, atol=1e-9):
            bad(f"{where}: {status.name} wrote {c.action}, not the safe action {safe}")
        if response == "hold" and last is not None and last != safe and c.at - spell.started < hold_s:
            bad(f"{where}: the safe action within {1e3 * (c.at - spell.started):.0f} ms of the fault (hold_ms "
                f"{HOLD_MS:g})")  # fmt: skip
        if response == "ramp" and last is not None and prev is not None:
            _check_ramp_step(where, c, prev, last, node_map, bad)
        return
    if code == base + HELD:
        if response != "hold":
            bad(f"{where}: held on {status.name}, whose response is {response}")
        if last is None or c.action != last:
            bad(f"{where}: held {c.action}, the last action written was {last}")
        if c.started - spell.at > hold_s:
            bad(
                f"{where}: still holding {1e3 * (c.started - spell.at):.0f} ms into the fault (hold_ms {HOLD_MS:g})"
            )
        return
    if response != "ramp":  # RAMPING
        bad(f"{where}: ramped on {status.name}, whose response is {response}")
    io = plant_io_of(srv.policy)
    a = np.asarray(c.action)
    if np.any(a < np.asarray(io.action_low) - 1e-9) or np.any(a > np.asarray(io.action_high) + 1e-9):
        bad(f"{where}: the ramp left the action bounds: {c.action}")
    if last is not None and prev is not None:
        _check_ramp_step(where, c, prev, last, node_map, bad)
        if np.any(np.abs(a - safe) > np.abs(np.asarray(last) - safe) + 1e-9):
            bad(f"{where}: the ramp moved away from the safe action: {last} -> {c.action}")


def _check_ramp_step(
    where: str, c: Cycle, prev: Cycle, last: list[float], node_map: NodeMap, bad: Any
) -> None:
    """No component moved faster than ramp_rate (the safe action reached at the end of a ramp included)."""
    rate = np.asarray(node_map.fault_responses.ramp_rate or (), np.float64)
    step = np.abs(np.asarray(c.action) - np.asarray(last))
    if np.any(step > rate * (c.at - prev.started) + 1e-9):
        bad(f"{where}: a ramp step of {step.tolist()} in at most {1e3 * (c.at - prev.started):.0f} ms (rate "
            f"{rate.tolist()})")  # fmt: skip
