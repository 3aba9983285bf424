"""The map's fault responses (plc_bridge.fault_response): safe, hold for at most hold_ms, ramp toward the
safe action at ramp_rate, and the status codes that tell the PLC which; checked on explicit times. Over
OPC UA, with plc-sim's trace, in tests/test_serve_loop.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.fault_response import (
    HELD,
    RAMPING,
    FaultResponder,
    FaultResponses,
    parse_fault_responses,
)
from rl2edge.plc_bridge.nodemap import load_node_map
from rl2edge.plc_bridge.status import CycleStatus

OK, MISS, INVALID, STALE = (
    CycleStatus.OK,
    CycleStatus.DEADLINE_MISS,
    CycleStatus.INVALID_OBSERVATION,
    CycleStatus.STALE,
)


def _run(responder: FaultResponder, statuses: list[CycleStatus], period_s: float = 0.02) -> list[tuple]:
    """Every cycle's (written action, status code); the policy's action is the cycle's index."""
    return [
        (tuple(a), code)
        for a, code in (
            responder.respond(s, [float(i), -float(i)], i * period_s) for i, s in enumerate(statuses)
        )
    ]


def test_hold_repeats_the_last_action_for_at_most_hold_ms_then_goes_safe() -> None:
    responder = FaultResponder(
        FaultResponses({"deadline_miss": "hold"}, hold_ms=40), [0.0, 0.0], discrete=False
    )
    out = _run(responder, [OK, OK, MISS, MISS, MISS, MISS, OK, MISS])
    assert out == [
        ((0.0, 0.0), 0),
        ((1.0, -1.0), 0),
        ((1.0, -1.0), 3 + HELD),  # 0 ms into the fault
        ((1.0, -1.0), 3 + HELD),  # 20 ms
        ((1.0, -1.0), 3 + HELD),  # 40 ms: hold_ms reached, still held
        ((0.0, 0.0), 3),  # 60 ms: past hold_ms, the safe action with the fault's own code
        ((6.0, -6.0), 0),  # a healthy cycle: the policy's action again
        ((6.0, -6.0), 3 + HELD),  # a new fault holds anew
    ]


def test_ramp_moves_toward_the_safe_action_within_its_rate_per_component() -> None:
    responder = FaultResponder(
        FaultResponses({"stale": "ramp"}, ramp_rate=(10.0, 50.0)), [0.0, 0.5], discrete=False
    )
    responder.respond(OK, [1.0, -1.0], 0.0)
    written = [responder.respond(STALE, [9.0, 9.0], t) for t in np.arange(1, 12) * 0.02]
    actions = np.array([a for a, _ in written])
    # at most 10 * 0.02 = 0.2 and 50 * 0.02 = 1.0 per cycle, each component toward its safe value
    steps = np.abs(np.diff(np.vstack([[1.0, -1.0], actions]), axis=0))
    assert (steps[:, 0] <= 0.2 + 1e-12).all() and (steps[:, 1] <= 1.0 + 1e-12).all()
    np.testing.assert_allclose(actions[:3], [[0.8, 0.0], [0.6, 0.5], [0.4, 0.5]], atol=1e-12)
    assert [c for _, c in written[:5]] == [2 + RAMPING] * 5
    assert written[-1] == ([0.0, 0.5], 2)  # arrived: the safe action, the fault's code alone


def test_defaults_hold_a_box_action_through_a_deadline_miss_and_go_safe_otherwise() -> None:
    box = FaultResponder(FaultResponses(), [0.0], discrete=False)
    assert box.responses == {
        "deadline_miss": "hold",
        "invalid": "safe",
        "stale": "safe",
        "inference_error": "safe",
    }
    discrete = FaultResponder(FaultResponses(), [0.0], discrete=True)
    assert set(discrete.responses.values()) == {"safe"}
    box.respond(OK, [0.7], 0.0)
    assert box.respond(MISS, [0.1], 0.02) == ([0.7], 3 + HELD)
    assert box.respond(INVALID, [0.1], 0.04) == ([0.0], 1)
    # nothing written yet (start-up, a reconnect): nothing to hold, the safe action
    box.forget()
    assert box.respond(MISS, [0.3], 1.0) == ([0.0], 3)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("fault_response: {late: hold}", "fault_response names 'late'; the fault classes are deadline_miss"),
        ("fault_response: {stale: brake}", "fault_response.stale is 'brake'; choose safe, hold, ramp"),
        ("fault_response: {stale: ramp}", "a ramp response needs ramp_rate"),
        ("hold_ms: 0", "hold_ms must be a time from above 0 to 60000 ms"),
        ("ramp_rate: [1, -2]", "ramp_rate must be a finite positive number or a list of them"),
        ("ramp_rate: .inf", "ramp_rate must be a finite positive number"),
        ("ramp_rate: .nan", "ramp_rate must be a finite positive number"),
        ("hold_ms: .nan", "hold_ms must be a time from above 0 to 60000 ms"),
    ],
)
def test_a_wrong_fault_response_in_the_map_is_one_line(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(
        "observation: ns=2;s=O\nobservation_seq: ns=2;s=S\naction: ns=2;s=A\naction_seq: ns=2;s=AS\n"
        f"heartbeat: ns=2;s=H\nstatus: ns=2;s=St\n{extra}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_node_map(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_ramp_for_a_discrete_action_or_of_the_wrong_length_is_refused() -> None:
    ramp = parse_fault_responses({"fault_response": {"stale": "ramp"}, "ramp_rate": [1.0, 2.0]}, "map.yaml")
    with pytest.raises(ConfigError, match="a ramp response needs Box actions"):
        FaultResponder(ramp, [0.0], discrete=True)
    with pytest.raises(ConfigError, match="ramp_rate has 2 values; the action has 3 components"):
        FaultResponder(ramp, [0.0, 0.0, 0.0], discrete=False)


@pytest.mark.integration  # 10 s: the integration tier, which CI runs too
def test_evaluate_injects_faults_and_answers_them_as_the_map_says(cartpole_all, tmp_path: Path) -> None:
    """`rl2edge evaluate --inject-faults` through the real main(): the map's hold for deadline misses, the
    default (safe) for invalid observations, counted; the same seeds without faults for comparison."""
    import json

    from testkit.cli import assert_clean_failure, rl2edge

    _, root = cartpole_all
    node_map = tmp_path / "map.yaml"
    node_map.write_text(
        "observation: ns=2;s=O\nobservation_seq: ns=2;s=S\naction: ns=2;s=A\naction_seq: ns=2;s=AS\n"
        "heartbeat: ns=2;s=H\nstatus: ns=2;s=St\nsafe_action: 0\nfault_response: {deadline_miss: hold}\n"
        "hold_ms: 40\n"
    )
    args = ["evaluate", root / "fp32", "--episodes", "3", "--json"]
    proc = rl2edge(*args, "--inject-faults", "deadline_miss:0.05,invalid:0.02", "--map", node_map)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    faults = out["faults"]
    assert faults["responses"] == {
        "deadline_miss": "hold",
        "invalid": "safe",
        "stale": "safe",
        "inference_error": "safe",
    }
    assert faults["steps"] == sum(out["lengths"]) and 0.04 < faults["injected"] / faults["steps"] < 0.10, (
        faults
    )
    assert 0 < faults["held"] < faults["injected"] and faults["ramped"] == 0
    clean = json.loads(rl2edge(*args).stdout)
    assert "faults" not in clean and len(clean["returns"]) == 3
    table = rl2edge(*args[:-1], "--inject-faults", "deadline_miss:0.05", "--map", node_map)  # no --json
    assert table.returncode == 0 and "| --inject-faults deadline_miss:0.05 | count |" in table.stdout, (
        table.stdout
    )
    assert "| held " in table.stdout and "| injected " in table.stdout, table.stdout
    assert_clean_failure(rl2edge(*args, "--inject-faults", "late:0.1"), "give CLASS:RATE pairs")
    assert_clean_failure(rl2edge(*args, "--map", node_map), "--map applies with --inject-faults")


def test_a_ramp_too_slow_to_cross_the_action_range_within_the_cap_is_refused() -> None:
    """A ramp of 0.01 units/s across a range of 2 takes 200 s, past the 60 s cap a hold has: refused where
    the action's range is known; where it is not, the ramp still ends at the cap (the safe action)."""
    slow = parse_fault_responses({"fault_response": {"stale": "ramp"}, "ramp_rate": 0.01}, "map.yaml")
    with pytest.raises(ConfigError, match=r"crosses its range of 2 in more than 60 s .* at least 0.0333"):
        FaultResponder(slow, [0.0], discrete=False, action_span=[2.0])
    FaultResponder(slow, [0.0], discrete=False, action_span=[0.5])  # 50 s: within the cap
    responder = FaultResponder(slow, [0.0], discrete=False)
    responder.respond(OK, [1.0], 0.0)
    responder.respond(STALE, [1.0], 1.0)  # the fault begins
    out, code = responder.respond(STALE, [1.0], 31.0)
    assert 0.0 < out[0] < 1.0 and code == int(STALE) + RAMPING
    assert responder.respond(STALE, [1.0], 61.5) == ([0.0], int(STALE))


def test_a_hold_counts_from_the_deadline_not_from_the_late_reply() -> None:
    """A PLC that answers the read 300 ms late: the miss began at the deadline (20 ms), so by the time the
    late reply is written a 100 ms hold is over: the safe action, never a 300 ms old action as HELD."""
    responder = FaultResponder(FaultResponses({"deadline_miss": "hold"}, hold_ms=100), [0.0], discrete=False)
    responder.respond(OK, [0.7], 0.0)
    assert responder.respond(MISS, [0.7], 0.32, fault_began=0.02) == ([0.0], 3)
    responder.respond(OK, [0.5], 1.0)
    assert responder.respond(MISS, [0.5], 1.05, fault_began=1.02) == ([0.5], 3 + HELD)
