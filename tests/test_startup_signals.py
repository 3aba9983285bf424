"""A SIGHUP (`systemctl reload`, a deployer's swap) while serve starts is queued for the service's handler,
never the default action's exit 129 (issue 52: a SIGHUP in the first ~50 ms killed serve). The console
script blocks it before the CLI's imports (rl2edge.cli.entry); only the interpreter's own start-up precedes."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from testkit.cli import EXE


def _sighup_blocked(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_a_sighup_as_soon_as_serve_blocks_it_is_queued_not_fatal(cartpole_all, tmp_path: Path) -> None:
    took = []
    for _ in range(3):
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [EXE, "serve", str(cartpole_all[1] / "int8"), "--endpoint", "opc.tcp://127.0.0.1:9"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not _sighup_blocked(proc.pid):  # polled: the first moment a SIGHUP would be safe
                assert proc.poll() is None and time.monotonic() - t0 < 10
            took.append(time.monotonic() - t0)
            proc.send_signal(signal.SIGHUP)
            time.sleep(1.0)
            assert proc.poll() is None, f"serve ended with {proc.returncode} on a SIGHUP during start-up"
        finally:
            proc.kill()
            proc.wait(timeout=10)
    # the block comes before the CLI's imports: well inside the 50 ms the finding measured (not asserted as
    # a time: a loaded machine starts Python slower; the figure is logged for the record)
    print(f"SIGHUP blocked {min(took) * 1e3:.0f}-{max(took) * 1e3:.0f} ms after launch")
