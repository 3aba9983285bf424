"""`rl2edge train --nproc N`: N processes of the same command on this machine, as torchrun would start them
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), supervised: when one ends with an error or dies,
the others are stopped at once and the job fails; a stop request (Ctrl-C, SIGTERM) reaches every one.

Rank 0 writes the run (atomically, as one process would); the supervisor itself imports no framework.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from rl2edge.errors import TrainingError
from rl2edge.interrupts import Interrupted
from rl2edge.ports import free_port

_logger = logging.getLogger(__name__)

GRACE_S = 10.0
"""How long a stopped rank may take to clean up (rank 0 removes its staging folder) before SIGKILL."""
POLL_S = 0.1

_CHILD = ("-m", "rl2edge.cli")
"""How a rank starts: the console script's entry point (rl2edge.cli.__main__), on this Python."""


def _describe(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def _stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """Signal the ranks still running, wait GRACE_S for them, then kill what is left."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _terminal(stream: IO[str]) -> IO[str] | None:
    """Where the ranks write: this command's own stream (while it runs, descriptors 1 and 2 may point at
    rl2edge.native_output's sink, which the ranks would inherit), or the inherited descriptor when the
    stream has none (a test's capture)."""
    try:
        stream.flush()
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return stream


def run_job(argv: Sequence[str], nproc: int, out: Path) -> int:
    """Run `rl2edge <argv>` as ranks 0..nproc-1 of one job on this machine; 0 when every rank succeeded.
    Raises TrainingError naming the first rank that failed (the others are stopped). `out`: the run's
    --out, whose staging folder a killed rank 0 could not remove (the supervisor removes it)."""
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(nproc))
    env.update(LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0")
    procs: list[subprocess.Popen[bytes]] = []
    started = time.time()
    try:
        for rank in range(nproc):
            procs.append(
                subprocess.Popen(
                    [sys.executable, *_CHILD, *argv],
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdout=_terminal(sys.stdout),
                    stderr=_terminal(sys.stderr),
                )
            )
        _logger.info("data-parallel job: %d processes (pids %s)", nproc, ", ".join(str(p.pid) for p in procs))
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                rank, code = failed[0]
                _stop(procs)
                _remove_staging(out, started)
                said = " (its own message is above)" if code > 0 else ""
                raise TrainingError(
                    f"rank {rank} of {nproc} {_describe(code)}; the other processes were stopped and --out is "
                    f"as it was{said}"
                )
            if all(c == 0 for c in codes):
                return 0
            time.sleep(POLL_S)
    except Interrupted as exc:  # Ctrl-C reached the ranks too; a SIGTERM only this process: passed on
        _stop(procs, exc.signum)
        _remove_staging(out, started)
        raise
    except BaseException:
        _stop(procs)
        _remove_staging(out, started)
        raise


def _remove_staging(out: Path, since: float) -> None:
    """Rank 0 writes the run beside --out (rl2edge.fileio.atomic_directory) and removes that folder when it
    fails; killed (SIGKILL, the OOM killer) it cannot: the folders of this job's time are removed here."""
    for staging in out.parent.glob(f".{out.name}.*.partial"):
        with contextlib.suppress(OSError):
            if staging.stat().st_mtime >= since - 1.0:
                shutil.rmtree(staging, ignore_errors=True)
                _logger.info("removed %s, left by a rank that was killed", staging)
