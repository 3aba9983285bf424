"""The installed `rl2edge` command as users call it, and what a clean failure of it looks like."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXE = str(Path(sys.executable).with_name("rl2edge"))


def rl2edge(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`env`: variables added to this process's (PYTHONPATH for a user's env module, say)."""
    return subprocess.run(
        [EXE, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        env=None if env is None else {**os.environ, **env},
    )


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    for f in fragments:
        assert f in last, last
