"""Waking at a control slot on time, at little CPU cost: the event loop's timer to within `lead` of the slot,
then the kernel's own sleep, then a spin for the last tenth of a millisecond.

The event loop's timer wakes 0.1-1 ms late: its poll timeout is rounded up to whole milliseconds, and the
wake-up is the kernel's. `time.sleep` (clock_nanosleep) is precise to the kernel's timer slack (50 us by
default), but blocks the event loop; so it is used only inside the lead, where the loop blocked anyway
while spinning, and the spin is left only the last SPIN_TAIL_S. Measured with a 1 ms lead on this
project's 2-core host (2 ms, the serve loop's default): benchmarks/loop_latency.py, CPU ms per cycle and
start lateness per row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SPIN_TAIL_S = 150e-6
"""Spun, not slept: the timer slack and the wake-up's scheduling latency, with room to spare."""

WARM_UP_MIN_S = 0.5e-3
"""The least of the lead that `before_slot` needs left to run (a cold CartPole decision takes some 0.15 ms):
it must never delay the slot, so a short lead or a late wake-up goes without it."""


async def until_slot(
    slot: float,
    lead_s: float,
    stopping: asyncio.Future,
    before_slot: Callable[[], None] | None = None,
    before_slot_s: float = WARM_UP_MIN_S,
) -> None:
    """Return at `slot` (the running loop's clock), or early once `stopping` is done. `lead_s` 0: the event
    loop's timer alone. `before_slot`: work for the lead (the serve loop's warm-up), run only while more
    than `before_slot_s` (at least WARM_UP_MIN_S) of it is left."""
    clock = asyncio.get_running_loop().time
    delay = slot - clock() - lead_s
    if delay > 0:  # until the lead, or at once on SIGINT/SIGTERM whatever the period
        await asyncio.wait((stopping,), timeout=delay)
    if stopping.done():
        return
    if lead_s > 0:
        if before_slot is not None and slot - clock() > max(before_slot_s, WARM_UP_MIN_S):
            before_slot()
        rest = slot - clock() - SPIN_TAIL_S
        if rest > 0:
            time.sleep(rest)  # noqa: ASYNC251  # deliberate: the spin it replaces blocked the loop too
    while clock() < slot:  # the last fraction of a millisecond: punctual, at a core's cost
        pass
