"""Staleness in the plant's time (plc_bridge.observation_guard.StaleClock): the loop's period no longer
decides it. Reads are simulated on explicit monotonic times; the closed loop over plc-sim is in
tests/test_serve_loop.py."""

from __future__ import annotations

import numpy as np
import pytest

from rl2edge.plc_bridge.observation_guard import StaleClock


def _serve(clock: StaleClock, publish_ms: int, period_ms: int, cycles: int, stop_ms: int | None = None):
    """Reads every `period_ms` of a PLC that publishes a new sequence number every `publish_ms` until
    `stop_ms` (integer milliseconds, so that no rounding moves a publication): (read times in s, stale
    flags, the time in s of the read that saw the last new sequence number)."""
    flags, seen, last_seq = [], 0.0, None
    times = [i * period_ms for i in range(cycles)]
    for t in times:
        seq = (t if stop_ms is None else min(t, stop_ms)) // publish_ms
        if seq != last_seq:
            seen, last_seq = t / 1000, seq
        flags.append(clock.is_stale(seq, t / 1000)[0])
    return np.array(times) / 1000, np.array(flags), seen


def test_a_10_hz_plant_served_every_20_ms_is_never_stale_and_flagged_once_it_stops() -> None:
    clock = StaleClock(None, None)
    _, flags, _ = _serve(clock, 100, 20, 5000)
    assert flags.sum() == 0
    assert clock.limit_ms() == pytest.approx(500.0) and "5x the observed publishing interval" in clock.rule
    # the same plant, then it stops publishing at t = 60 s: flagged from 500 ms after its last change on
    clock = StaleClock(None, None)
    times, flags, last = _serve(clock, 100, 20, 5000, stop_ms=60_000)
    first = times[np.argmax(flags)]
    assert flags[times < 60.0].sum() == 0 and flags[times > last + 0.5 + 0.02].all()
    assert 0.5 < first - last <= 0.5 + 0.02 + 1e-9, first - last  # within one read of the limit


def test_a_plant_slower_than_the_loop_is_not_stale_and_the_maps_limit_rules() -> None:
    # a 1 Hz plant at a 20 ms period: 50 reads per publication, never stale (the older rule, 5 cycles,
    # flagged 45 of every 50)
    _, flags, _ = _serve(StaleClock(None, None), 1000, 20, 5000)
    assert flags.sum() == 0
    _, flags, _ = _serve(StaleClock(None, 5), 1000, 20, 5000)
    assert flags.sum() == 45 * 100
    # the map's stale_ms: a 10 Hz plant read every 20 ms is stale past 250 ms without a change, whatever
    # it observed before
    clock = StaleClock(250.0, None)
    times, flags, last = _serve(clock, 100, 20, 1000, stop_ms=10_000)
    assert (
        0.25 < times[np.argmax(flags)] - last <= 0.27 + 1e-9 and clock.rule == "250 ms (the map's stale_ms)"
    )


def test_before_the_interval_is_known_a_silent_plc_is_stale_after_2_s() -> None:
    clock = StaleClock(None, None)
    assert clock.is_stale(7, 100.0) == (False, "")
    assert not clock.is_stale(7, 101.999)[0]
    stale, why = clock.is_stale(7, 102.001)
    assert stale and why == "sequence number 7 unchanged for 2001 ms (stale after 2000 ms)"
    # a reconnect starts over, and keeps what it learnt of the plant's interval
    for i in range(6):
        clock.is_stale(i, 200.0 + 0.1 * i)
    clock.reset()
    assert not clock.is_stale(9, 300.0)[0] and clock.limit_ms() == pytest.approx(500.0)
    assert clock.is_stale(9, 300.501)[0]


def test_a_plant_that_changes_its_rate_gets_a_limit_that_follows_within_two_steps() -> None:
    """A healthy plant slows from 20 ms to 500 ms steps (issue 52): the limit follows with its second slow
    step, so STALE falls only in the first two (from 100 ms, 5x the old interval, to their ends); with the
    long window's median alone it lagged 17 steps, ~80 % of reads STALE for 8.5 s. Speeding up again, the
    limit comes back down within the window's 17 faster steps."""
    clock = StaleClock(None, None)
    flags, t, seq = [], 0, 0
    changes = [20] * 200 + [500] * 40 + [20] * 100  # ms between new sequence numbers
    change_at = np.cumsum(changes)
    for t in range(0, int(change_at[-1]), 10):  # a read every 10 ms
        seq = int(np.searchsorted(change_at, t, side="right"))
        flags.append((t, clock.is_stale(seq, t / 1000)[0]))
    slow_from, slow_to = change_at[199], change_at[239]
    stale_slow = [t for t, f in flags if f and slow_from <= t < slow_to]
    assert stale_slow and max(stale_slow) < slow_from + 1000, (len(stale_slow), max(stale_slow) - slow_from)
    assert not any(f for t, f in flags if t < slow_from or t >= slow_to)
    assert clock.limit_ms() == pytest.approx(100.0)  # back to 5x 20 ms once the median follows


def test_one_long_interval_does_not_lengthen_the_limit_for_the_next_stall() -> None:
    """A 10 Hz plant that stalls for 10 s and resumes: the stall is flagged after 500 ms, and so is a second
    stall right after (a rule that took the longest recent interval would wait 50 s)."""
    clock = StaleClock(None, None)
    t, seq = 0.0, 0
    for _ in range(40):  # 10 Hz
        t, seq = t + 0.1, seq + 1
        assert not clock.is_stale(seq, t)[0]
    assert clock.is_stale(seq, t + 0.501)[0]  # the stall, flagged at 5x 100 ms
    t, seq = t + 10.0, seq + 1  # it resumes after 10 s
    assert not clock.is_stale(seq, t)[0]
    for _ in range(3):
        t, seq = t + 0.1, seq + 1
        clock.is_stale(seq, t)
    assert clock.limit_ms() == pytest.approx(500.0) and clock.is_stale(seq, t + 0.501)[0]
