"""`serve --realtime` (plc_bridge.realtime): SCHED_FIFO, locked memory and the garbage collector out of the
cycle, asked for by the process itself, and one line saying what to grant where it may not. Each case that
changes the scheduler runs in a child process; the loop under load is benchmarks/loop_under_load.py."""

from __future__ import annotations

import gc
import os
import resource
import shutil
import subprocess
import sys

import pytest

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.realtime import GcPacer, may_lock_memory, parse_cpus
from testkit.cli import assert_clean_failure, rl2edge

_APPLY = (
    "import json, os; from rl2edge.plc_bridge.realtime import RealtimeConfig, apply_realtime; "
    "s = apply_realtime(RealtimeConfig(priority=20, cpus=(0,))); "
    "print(json.dumps([s.to_json(), os.sched_getscheduler(0) == os.SCHED_FIFO, sorted(os.sched_getaffinity(0))]))"
)


def _may_use_fifo() -> bool:
    return may_lock_memory() and (os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] >= 20)


def test_cpu_lists_parse_and_a_wrong_one_is_one_line() -> None:
    usable = sorted(os.sched_getaffinity(0))
    first, last = usable[0], usable[-1]
    assert parse_cpus(str(first)) == (first,)
    assert parse_cpus(f"{first}-{first},{first}") == (first,)
    if usable == list(range(first, last + 1)):
        assert parse_cpus(f"{first}-{last}") == tuple(usable)
    with pytest.raises(ConfigError, match=r"give CPU numbers, e\.g\. 3 or 2,3 or 2-3"):
        parse_cpus("all")
    # a CPU this process may not use, and a range 10**12 wide, judged by its ends: no set is built
    with pytest.raises(ConfigError, match=rf"CPU {last + 1} is not one this process may use"):
        parse_cpus(str(last + 1))
    with pytest.raises(ConfigError, match=r"CPU 1000000000000 is not one this process may use"):
        parse_cpus("0-1000000000000")
    with pytest.raises(ConfigError, match=r"'3-1' is not a CPU range low-high"):
        parse_cpus("3-1")


def test_the_pacer_collects_after_the_write_what_the_automatic_collector_would_have() -> None:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        pacer = GcPacer()
        for _ in range(2 * pacer.thresholds[0]):
            cycle: list = []
            cycle.append(cycle)  # garbage only a collection frees
        assert gc.get_count()[0] > pacer.thresholds[0]
        pacer.collect_if_due()
        assert pacer.collections == 1 and gc.get_count()[0] < pacer.thresholds[0]
        pacer.collect_if_due()  # nothing due: no collection
        assert pacer.collections == 1
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.skipif(
    not _may_use_fifo(), reason="this process may not use SCHED_FIFO; the refusal is tested below"
)
def test_realtime_takes_sched_fifo_locks_memory_and_freezes_the_collector() -> None:
    proc = subprocess.run([sys.executable, "-c", _APPLY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json

    state, fifo, cpus = json.loads(proc.stdout)
    assert fifo and cpus == [0]
    assert state == {
        "scheduler": "SCHED_FIFO 20 (--realtime)",
        "memory_locked": True,
        "gc": "frozen after start-up, collected after the write",
        "cpus": [0],
    }
    # under a unit's CPUSchedulingPolicy=fifo (chrt here) the priority asked for is in force: kept, and
    # recorded as inherited (the unit's RestrictRealtime=yes would refuse setting it again)
    chrt = shutil.which("chrt")
    if chrt:
        proc = subprocess.run(
            [chrt, "-f", "20", sys.executable, "-c", _APPLY], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)[0]["scheduler"] == "SCHED_FIFO 20 (inherited)"


def _no_rtprio() -> None:
    resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))


def test_a_process_that_may_not_use_sched_fifo_is_told_what_to_grant() -> None:
    """No rtprio allowance and, as root, no CAP_SYS_NICE (setpriv drops it from the bounding set): what
    a container without --cap-add SYS_NICE or a user without an rtprio limit gets."""
    cmd = [sys.executable, "-c", _APPLY]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv (util-linux) to drop CAP_SYS_NICE")
        cmd = [setpriv, "--bounding-set", "-sys_nice", "--inh-caps", "-sys_nice", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, preexec_fn=_no_rtprio)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "may not use SCHED_FIFO (EPERM)" in last and "CAP_SYS_NICE" in last and "rtprio" in last, last


def test_serve_refuses_a_priority_out_of_range_before_connecting() -> None:
    proc = rl2edge("serve", "no-artifact", "--endpoint", "opc.tcp://127.0.0.1:1", "--realtime", "120")
    assert_clean_failure(proc, "--realtime: '120' is out of range: give a whole number from 1 to 99")
