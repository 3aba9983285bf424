"""Every number that comes from outside, parsed once, with its bounds.

Each object here is an argparse `type=`: the command line and the `--config` file (which converts its
values through the same `type`) share it, so an option is judged the same way wherever it is given. A
value out of bounds is an `argparse.ArgumentTypeError` whose text says what is allowed; the CLI shows it
in one line and exits 2.

Why bounds everywhere: a seed past 2**32 - 1 is a traceback deep in numpy, a NaN interval never fires,
an interval of 1e-9 s writes a stats line every cycle, and a CPU range 10**12 wide built as a set takes
the device's memory. Each bound below says what it protects.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass

from rl2edge.errors import short_repr

MAX_SEED = 2**32 - 1
"""Seeds go to numpy's legacy generator (through Keras and Optuna) and to torch: 0 .. 2**32 - 1 fits all."""
MAX_NOISE_SEED = 2**64 - 1
"""A folded noise's seed (numpy's default_rng; the manifest schema's bound)."""
MAX_COUNT = 10**12
"""Env steps, cycles, episodes: above this a run would not end in a human lifetime; the bound keeps
arithmetic on them in int64."""


@dataclass(frozen=True)
class Integer:
    """A whole number from `lo` to `hi`, e.g. Integer(1, 10**6, "episodes")."""

    lo: int
    hi: int
    what: str

    @property
    def __name__(self) -> str:  # argparse names the type in some messages
        return "integer"

    def allowed(self) -> str:
        hi = (
            "2**32 - 1" if self.hi == MAX_SEED else "2**64 - 1" if self.hi == MAX_NOISE_SEED else f"{self.hi}"
        )
        return f"a whole number from {self.lo} to {hi} ({self.what})"

    def __call__(self, text: str) -> int:
        try:
            value = int(str(text).strip(), 10)
        except ValueError:  # "1.5", "nan", "1e3", "0-5", 100,000 digits
            raise argparse.ArgumentTypeError(f"{short_repr(text)}: give {self.allowed()}") from None
        if not self.lo <= value <= self.hi:
            raise argparse.ArgumentTypeError(f"{short_repr(text)} is out of range: give {self.allowed()}")
        return value


@dataclass(frozen=True)
class Number:
    """A finite number from `lo` to `hi` (above `lo` if `lo_open`), in `unit`."""

    lo: float
    hi: float
    what: str
    unit: str = ""
    lo_open: bool = False

    @property
    def __name__(self) -> str:
        return "number"

    def allowed(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        low = f"above {self.lo:g}" if self.lo_open else f"from {self.lo:g}"
        return f"a finite number {low} to {self.hi:g}{unit} ({self.what})"

    def __call__(self, text: str) -> float:
        try:
            value = float(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{short_repr(text)}: give {self.allowed()}") from None
        inside = (self.lo < value if self.lo_open else self.lo <= value) and value <= self.hi
        if not math.isfinite(value) or not inside:  # NaN fails every comparison: refused here too
            raise argparse.ArgumentTypeError(f"{short_repr(text)} is out of range: give {self.allowed()}")
        return value


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    return frozenset(os.sched_getaffinity(0))


def cpu_list(text: str) -> tuple[int, ...]:
    """`3`, `2,3` or `2-3`: CPUs this process may use. Each range is checked against those CPUs by its
    ends before any set is built, so a range 10**12 wide costs nothing."""
    usable = usable_cpus()
    shown = _ranges(sorted(usable))
    cpus: set[int] = set()
    for part in str(text).split(","):
        lo_text, dash, hi_text = part.strip().partition("-")
        try:
            lo = int(lo_text, 10)
            hi = int(hi_text, 10) if dash else lo
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{short_repr(text)}: give CPU numbers, e.g. 3 or 2,3 or 2-3 (this process may use {shown})"
            ) from None
        if not 0 <= lo <= hi:
            raise argparse.ArgumentTypeError(
                f"{short_repr(text)}: {short_repr(part.strip())} is not a CPU range low-high (this process may use {shown})"
            )
        if hi > max(usable):
            raise argparse.ArgumentTypeError(
                f"{short_repr(text)}: CPU {short_repr(hi)} is not one this process may use; it may use {shown}"
            )
        missing = [c for c in range(lo, hi + 1) if c not in usable]
        if missing:
            raise argparse.ArgumentTypeError(
                f"{short_repr(text)}: CPU {missing[0]} is not one this process may use; it may use {shown}"
            )
        cpus.update(range(lo, hi + 1))
    return tuple(sorted(cpus))


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    start = prev = cpus[0]
    for c in [*cpus[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(out)


# The options, one parser each; every command that takes an option uses the same one.
SEED = Integer(0, MAX_SEED, "a seed")
NOISE_SEED = Integer(0, MAX_NOISE_SEED, "a noise seed")
EPISODES = Integer(1, 10**6, "episodes")
STEPS = Integer(1, MAX_COUNT, "env steps")
CYCLES = Integer(1, MAX_COUNT, "cycles")
THREADS = Integer(1, 1024, "threads")
WORKERS = Integer(0, 1024, "rollout workers (0: none)")
PROCESSES = Integer(1, 1024, "processes")
TRIALS = Integer(1, 100_000, "trials")
CONCURRENT = Integer(1, 1024, "trials at once")
REDUCTION_FACTOR = Integer(2, 100, "ASHA's reduction factor")
FAILURES = Integer(0, 100, "retries")
DAYS = Integer(1, 36_500, "days of validity")
PORT = Integer(1, 65_535, "a TCP port")
HEALTH_PERIODS = Integer(1, 1_000_000, "periods")
SHADOW_CYCLES = Integer(0, 1_000_000, "shadow cycles (0: no shadow run)")
RT_PRIORITY = Integer(1, 99, "a SCHED_FIFO priority")
PERIOD_MS = Number(1.0, 60_000.0, "a period", "ms")
"""Below 1 ms a cycle cannot do its Read, inference and Write; above a minute it is no control loop."""
DEADLINE_MS = Number(0.0, 60_000.0, "a deadline", "ms", lo_open=True)
SPIN_MS = Number(0.0, 60_000.0, "a lead before each slot (below the period)", "ms")
TIMEOUT_MS = Number(10.0, 600_000.0, "a request timeout", "ms")
"""A request answered in under 10 ms is not one to time out; 10 minutes is a dead link."""
STATS_INTERVAL_S = Number(0.1, 86_400.0, "an interval between stats lines", "s")
"""A floor of 0.1 s: a stats line (and a summary rewrite) per cycle would be the loop's main work."""
WATCH_INTERVAL_S = Number(0.05, 3600.0, "an interval between polls", "s")
STATUS_TIMEOUT_S = Number(0.0, 300.0, "a timeout", "s", lo_open=True)
SHARE = Number(0.0, 1.0, "a share")
PERCENT = Number(0.0, 100.0, "a percentage")
COMMIT_TIMEOUT_S = Number(1.0, 86_400.0, "a time to wait for serve to take a policy over", "s")
KEEP = Integer(1, 1000, "policies to keep")
RECORD_MB = Number(1.0, 10**7, "a trace's size bound", "MB")
DRIFT_THRESHOLD = Number(0.0, 1e6, "a drift threshold", "training standard deviations", lo_open=True)
DRIFT_WINDOW = Integer(2, 1_000_000, "observations in the drift window")
MAX_SEEDS = 1000
"""A sweep over more seeds than this is a typo (`0-1000`), not a plan."""


def seed_list(text: str) -> tuple[int, ...]:
    """`0,1,2`: distinct seeds, at most MAX_SEEDS of them."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts or len(parts) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(
            f"{short_repr(text)}: give 1 to {MAX_SEEDS} distinct comma-separated seeds, such as 0,1,2"
        )
    seeds = tuple(SEED(p) for p in parts)
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{short_repr(text)}: give distinct seeds, such as 0,1,2")
    return seeds
