"""`serve --realtime`: what keeps a busy CPU from making the loop late, asked for by the process itself
(a Jetson running serve in a container or by hand gets none of the systemd unit's settings).

- SCHED_FIFO at the given priority, set before serve starts its threads and its model process, which
  inherit it (as the unit's CPUSchedulingPolicy=fifo gives every thread of the service);
- `mlockall(MCL_CURRENT | MCL_FUTURE)`: no page fault on the cycle's path after start-up;
- the garbage collector kept out of the cycle: the automatic collector off, everything allocated by
  start-up frozen (`gc.freeze`, again once connected, when the OPC UA client and the model are loaded),
  and the generations collected after each write (and in a reconnect's backoff) when the allocation counts
  say CPython would have (`GcPacer`), so a collection never lands between read and write;
- optionally, the CPUs the process may run on (`--cpu-affinity`).

Each step that the process may not take is one line that says what to grant. `RealtimeState` is what was
in force, as the summary records it (a unit's own SCHED_FIFO shows there as inherited).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import gc
import logging
import os
from dataclasses import asdict, dataclass

from rl2edge.bounded import cpu_list
from rl2edge.errors import ConfigError

_logger = logging.getLogger(__name__)

MCL_CURRENT, MCL_FUTURE = 1, 2
DEFAULT_PRIORITY = 50
"""`--realtime` without a value: the shipped unit's CPUSchedulingPriority."""

_GRANT_RT = (
    "grant it: in the systemd unit CPUSchedulingPolicy=fifo (or LimitRTPRIO=99 with AmbientCapabilities="
    "CAP_SYS_NICE); in Docker --cap-add SYS_NICE --ulimit rtprio=99; by hand, run as root or set an rtprio "
    "limit for the user in /etc/security/limits.conf"
)
_GRANT_MEMLOCK = (
    "grant it: in the systemd unit LimitMEMLOCK=infinity; in Docker --ulimit memlock=-1 (or --cap-add "
    "IPC_LOCK); by hand, ulimit -l unlimited"
)


@dataclass(frozen=True)
class RealtimeConfig:
    priority: int | None = None
    """SCHED_FIFO priority (1-99); None: the scheduler is left as the process got it."""
    cpus: tuple[int, ...] | None = None
    """CPUs the process may run on; None: left as it is."""

    @property
    def requested(self) -> bool:
        return self.priority is not None or self.cpus is not None


@dataclass(frozen=True)
class RealtimeState:
    scheduler: str
    """e.g. "SCHED_FIFO 50 (--realtime)", "SCHED_FIFO 50 (inherited)", "SCHED_OTHER"."""
    memory_locked: bool
    gc: str
    cpus: list[int]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def parse_cpus(text: str) -> tuple[int, ...]:
    """`3` or `2,3` or `2-3`: the CPUs of --cpu-affinity, among those this process may use (rl2edge.bounded)."""
    try:
        return cpu_list(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"--cpu-affinity {exc}") from None


def apply_realtime(cfg: RealtimeConfig) -> RealtimeState:
    """Take what `cfg` asks for, in this process, before serve starts its threads; a step the process may
    not take is a ConfigError naming what to grant. Without --realtime nothing changes, and the state
    records what the process got (a unit's SCHED_FIFO included)."""
    if cfg.cpus is not None:
        try:
            os.sched_setaffinity(0, cfg.cpus)
        except OSError as exc:
            online = sorted(os.sched_getaffinity(0))
            raise ConfigError(
                f"--cpu-affinity {','.join(map(str, cfg.cpus))}: {exc.strerror}; this process may run on CPUs "
                f"{online}"
            ) from None
    locked = inherited = False
    if cfg.priority is not None:
        top = os.sched_get_priority_max(os.SCHED_FIFO)
        if not 1 <= cfg.priority <= top:
            raise ConfigError(f"--realtime {cfg.priority}: choose a SCHED_FIFO priority from 1 to {top}")
        inherited = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == (
            os.SCHED_FIFO,
            cfg.priority,
        )
        try:
            if not inherited:  # the unit's CPUSchedulingPolicy (with RestrictRealtime=yes) already did it
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.priority))
        except PermissionError:
            raise ConfigError(
                f"--realtime {cfg.priority}: this process may not use SCHED_FIFO (EPERM); {_GRANT_RT}"
            ) from None
        _lock_memory()
        locked = True
        _freeze_gc()
    state = RealtimeState(
        scheduler=_scheduler(requested=cfg.priority is not None and not inherited),
        memory_locked=locked,
        gc="frozen after start-up, collected after the write"
        if cfg.priority is not None
        else "CPython default",
        cpus=sorted(os.sched_getaffinity(0)),
    )
    if cfg.requested:
        _logger.info(
            "realtime: %s, memory %s, gc %s, CPUs %s",
            state.scheduler,
            "locked" if state.memory_locked else "not locked",
            state.gc,
            state.cpus,
        )
    return state


def current_state() -> RealtimeState:
    """What the process runs with, nothing asked for (serve without --realtime)."""
    return RealtimeState(
        _scheduler(requested=False), False, "CPython default", sorted(os.sched_getaffinity(0))
    )


def _scheduler(requested: bool) -> str:
    policy = os.sched_getscheduler(0)
    if policy in (os.SCHED_FIFO, os.SCHED_RR):
        name = "SCHED_FIFO" if policy == os.SCHED_FIFO else "SCHED_RR"
        return f"{name} {os.sched_getparam(0).sched_priority} ({'--realtime' if requested else 'inherited'})"
    return {os.SCHED_OTHER: "SCHED_OTHER"}.get(policy, f"policy {policy}")


def may_lock_memory() -> bool:
    """mlockall(MCL_FUTURE) holds for the whole run only without a memlock limit (or as root): with one,
    a later allocation (a thread's stack at a reconnect) would fail long after start-up."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return os.geteuid() == 0 or soft == resource.RLIM_INFINITY


def _lock_memory() -> None:
    if not may_lock_memory():
        raise ConfigError(
            "--realtime: the memlock limit is finite (ulimit -l), and locked memory would make allocations fail "
            f"later in the run; {_GRANT_MEMLOCK}"
        )
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE) != 0:
        err = ctypes.get_errno()
        raise ConfigError(
            f"--realtime: mlockall failed ({errno.errorcode.get(err, err)}: {os.strerror(err)}); {_GRANT_MEMLOCK}"
        )


def _freeze_gc() -> None:
    """The automatic collector off (GcPacer collects in the slack instead), and start-up's objects so far
    out of every later collection's work."""
    gc.disable()
    GcPacer.freeze()


class GcPacer:
    """The collections CPython would run, run where they cost no cycle: after the write. CPython collects
    generation g when its count exceeds its threshold (700, 10, 10 by default); the pacer checks the counts
    after each write and collects the oldest generation due. The objects frozen at start-up are in no
    collection, so a full one costs what the run has allocated since, not the imports."""

    def __init__(self) -> None:
        self.thresholds = gc.get_threshold()
        self.collections = 0

    @staticmethod
    def freeze() -> None:
        gc.collect()
        gc.freeze()

    def collect_if_due(self) -> None:
        counts = gc.get_count()
        if counts[0] <= self.thresholds[0]:
            return
        generation = 0
        for g in (1, 2):
            if self.thresholds[g] and counts[g] > self.thresholds[g]:
                generation = g
        gc.collect(generation)
        self.collections += 1
