"""Type-check every package (rl2edge's own modules, cli/, runtime/, plc_bridge/, train/, export/) with mypy.

The repository keeps cli/, train/, export/, runtime/ and plc_bridge/ at its top and installs them as
rl2edge.<name> (pyproject's package-dir); mypy resolves modules by directory, not through the editable
install's import hook, so this script lays the installed shape out as symlinks in build/typecheck/ (a fixed
place: mypy's cache keys on paths) and checks that. Settings are pyproject's [tool.mypy]. Usage: python scripts/typecheck.py  (exit 1 on errors).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("cli", "train", "export", "runtime", "plc_bridge")
CHECKED = (
    "rl2edge",
    "rl2edge.runtime",
    "rl2edge.plc_bridge",
    "rl2edge.cli",
    "rl2edge.train",
    "rl2edge.export",
)


def installed_shape(into: Path) -> Path:
    """<into>/rl2edge/... as the wheel installs it, every entry a symlink into the repository."""
    shutil.rmtree(into, ignore_errors=True)
    pkg = into / "rl2edge"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "rl2edge").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name in SUBPACKAGES:
        (pkg / name).symlink_to(ROOT / name)
    return into


def main() -> int:
    shape = installed_shape(ROOT / "build" / "typecheck")
    # rl2edge's own modules one by one (-p rl2edge would walk the symlinked train/ and export/ too).
    own = [f"rl2edge.{p.stem}" for p in sorted((ROOT / "rl2edge").glob("*.py")) if p.stem != "__init__"]
    targets = ["-m", "rl2edge"] + [a for m in own for a in ("-m", m)]
    targets += [a for p in CHECKED[1:] for a in ("-p", p)]
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *targets]
    env = {"MYPYPATH": str(shape), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False, capture_output=True, text=True)
    # Messages name the repository's files, not the symlinks: build/typecheck/rl2edge/runtime/x.py -> runtime/x.py.
    out = proc.stdout + proc.stderr
    for prefix in (f"{shape}/", f"{shape.relative_to(ROOT)}/"):
        for name in SUBPACKAGES:
            out = out.replace(f"{prefix}rl2edge/{name}/", f"{name}/")
        out = out.replace(prefix, "")
    sys.stdout.write(out)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
