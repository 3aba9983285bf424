"""Subnormal floats flushed to zero while a torch agent takes its gradient steps, as TensorFlow's executor
does around every op it runs.

Adam's first moments of weights with a zero gradient (dead ReLU units) decay through float32's subnormal
range, where x86 takes a slow microcode path per operand (benchmarks/train_throughput.py measures the
trainers); what flushing drops is below what a float32 weight can register (tests/test_denormals.py).
The setting is per thread and inherited by the threads a thread starts: `start_workers_flushing` starts
torch's intra-op workers (GNU OpenMP) under the flush. Leaving the flush clears both FTZ and DAZ.
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
