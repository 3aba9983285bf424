"""How many CPU threads a training process's framework gives one op (torch's intra-op threads, TF's
intra-op pool): a process setting, read when an agent is made.

One thread is the default: on the 64-wide nets of PPO and DQN a second thread costs more in hand-off than
it saves, and one thread's results do not depend on how the work was split. On 256-wide layers (SAC, TD3)
a second core nearly doubles torch's matmul ([256,256]x[256,256]: 110 -> 197 GFLOP/s on this
project's 2-core machine, benchmarks/results/train_throughput_sac_t2.md); benchmarks/train_throughput.py --threads measures whole runs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache
from typing import Any

from rl2edge.errors import ConfigError

_threads = 1


def set_cpu_threads(n: int) -> None:
    """Set before the agent is made. TensorFlow takes it only before its first op in the process."""
    global _threads
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"--threads {n!r}: give a whole number of CPU threads, 1 or more")
    _threads = n


def cpu_threads() -> int:
    return _threads


@cache
def _numpy_blas() -> Any:
    # imported here: the CLI's parser reads this module (through train.algos) on the device, whose edge
    # install has no threadpoolctl (a training extra)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")  # the BLAS libraries loaded, found once


def one_blas_thread() -> AbstractContextManager[Any]:
    """numpy's BLAS (OpenBLAS) on one thread inside the `with`, the caller's setting back after it: the
    same bits whatever the machine's core count, and no idle OpenBLAS worker spinning on sched_yield
    beside a single-threaded trainer (it held the second core in off-policy runs). The frameworks' own
    thread pools are not numpy's and keep cpu_threads()."""
    return _numpy_blas().limit(limits=1)
