"""plc_bridge.slot_timer: the serve loop's wake-up. Never early, the warm-up inside the lead only, and a
stop request honoured at once. How late it is, and at what CPU cost, is benchmarks/loop_latency.py's."""

from __future__ import annotations

import asyncio

from rl2edge.plc_bridge.slot_timer import WARM_UP_MIN_S, until_slot


def _wake(
    lead_s: float, ahead_s: float, stop: bool = False, warm_up_s: float = WARM_UP_MIN_S
) -> tuple[float, float, list[float]]:
    """(slot, when until_slot returned, when the warm-up ran) on the running loop's clock."""

    async def scenario() -> tuple[float, float, list[float]]:
        loop = asyncio.get_running_loop()
        stopping = loop.create_future()
        if stop:
            stopping.set_result(None)
        warmed: list[float] = []
        slot = loop.time() + ahead_s
        await until_slot(slot, lead_s, stopping, lambda: warmed.append(loop.time()), warm_up_s)
        return slot, loop.time(), warmed

    return asyncio.run(scenario())


def test_never_early_and_the_warm_up_runs_inside_the_lead() -> None:
    runs = 0
    for _ in range(20):
        slot, woke, warmed = _wake(lead_s=2e-3, ahead_s=10e-3)
        assert woke >= slot
        assert len(warmed) <= 1 and all(slot - 2e-3 <= t < slot for t in warmed)
        runs += len(warmed)
    assert runs > 0  # skipped only when the event loop woke with less than WARM_UP_MIN_S of the lead left


def test_no_warm_up_in_a_lead_too_short_for_one_and_none_without_a_lead() -> None:
    for lead in (0.0, WARM_UP_MIN_S / 2):
        slot, woke, warmed = _wake(lead_s=lead, ahead_s=5e-3)
        assert woke >= slot and warmed == []


def test_no_warm_up_that_needs_more_than_the_lead() -> None:
    """The serve loop asks for twice its slowest recent decision: a model slower than the lead (a CNN on a
    Jetson) is never warmed up into the slot."""
    for _ in range(5):
        slot, woke, warmed = _wake(lead_s=2e-3, ahead_s=5e-3, warm_up_s=3e-3)
        assert woke >= slot and warmed == []


def test_a_stop_request_returns_at_once() -> None:
    slot, woke, warmed = _wake(lead_s=2e-3, ahead_s=10.0, stop=True)
    assert woke < slot - 9.0 and warmed == []
