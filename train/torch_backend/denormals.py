"""Subnormal floats flushed to zero while a torch agent takes its gradient steps, as TensorFlow's executor
does around every op it runs.

Why: Adam's first moment of a weight whose gradient is exactly zero (one into or out of a dead ReLU unit)
decays by beta1 = 0.9 each step and spends some 150 steps in float32's subnormal range (below 1.2e-38)
on its way to zero, and x86 CPUs take a slow microcode path for each subnormal operand. After 3000 steps
of SAC on Pendulum, 38k of the actor's 65k second-layer first moments were subnormal, and the run's
gradient step took 7.3 ms against 6.3 ms with subnormals flushed (timed by hand, two runs each). What
flushing drops is a weight change of lr * m / sqrt(v) with m below 1.2e-38: smaller than a float32
weight can register (a 3000-step run's weights came out bit for bit the same, by hand;
tests/test_denormals.py checks one phase from a state full of subnormal moments).

The setting is per thread (the x86 MXCSR's FTZ and DAZ bits, set by torch.set_flush_denormal), and a
thread takes it from the thread that starts it: with `--threads` above 1, `start_workers_flushing`
starts torch's intra-op workers (OpenMP threads) under the flush, and they keep it for the process.
In 3000-step SAC runs at two threads the train call took 4.86-4.98 ms with workers that did not flush
and 4.40-4.61 with workers that do (timed by hand, five runs). This holds for GNU OpenMP (libgomp, what
torch's Linux wheels ship), whose workers keep the MXCSR they started with; outside the training phase
they still flush, where the calling thread does not (harmless: what is flushed is below 1.2e-38).
Leaving the flush turns off both FTZ and DAZ: a caller that had set only one of them loses it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

# A subnormal float32 made from its bits (a float conversion could itself be flushed): 2^20 * 2^-149.
_SUBNORMAL = torch.tensor([1 << 20], dtype=torch.int32).view(torch.float32)


def flushing() -> bool:
    """Whether this thread flushes subnormals: the probe times one reads as zero then."""
    return bool(_SUBNORMAL.mul(1.0)[0] == 0.0)


@contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush subnormals on this thread inside the `with`; the caller's setting back after it (left on
    where it was on). Where the CPU cannot (torch.set_flush_denormal says so) nothing changes."""
    if flushing() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def start_workers_flushing(threads: int) -> None:
    """Set torch's intra-op threads to `threads` and, where more than one, start the workers under the
    flush: an elementwise op over more elements than one thread takes is split over all of them, and
    OpenMP starts its workers at the first such split. Workers the process started before keep their
    setting (a thread's flush cannot be set from another thread)."""
    torch.set_num_threads(threads)
    if threads > 1:
        with flush_denormals():
            torch.ones(threads * (1 << 16)).mul_(1.0)
