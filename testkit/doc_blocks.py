"""Fenced code blocks of the project's markdown, each with the marker comment that precedes it.

A shell block in README.md or docs/ is marked on the line before its fence (blank lines allowed between):

    <!-- not run: REASON -->                shown, not executed (a reason is required)
    <!-- run: tests/test_something.py -->   extracted and run by that test file, which names the doc

`shell_blocks(path)` returns the shell blocks of one file; a test that runs a doc's blocks picks those whose
`marker_kind` is "run" and whose `marker_arg` is its own path (tests/test_docs.py checks the markers).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})

_OPEN = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not run|run)\s*:(?P<arg>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file, the 1-based line of its opening fence, the marker before it (kind "run"
    or "not run" and its argument, else None and None), its language and its text (indent removed)."""

    path: Path
    line: int
    marker_kind: str | None
    marker_arg: str | None
    text: str
    lang: str = ""


def fenced_blocks(path: str | Path) -> list[Block]:
    """Every fenced block of a markdown file (``` or ~~~, indented ones too)."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        lang = m["info"].strip().split(" ")[0].lower() if m["info"].strip() else ""
        close = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        kind, arg = _marker_before(lines, i)
        blocks.append(Block(path, i + 1, kind, arg, "\n".join(body) + ("\n" if body else ""), lang))
        i = j + 1
    return blocks


def shell_blocks(path: str | Path) -> list[Block]:
    """The fenced blocks of a markdown file whose language is sh, bash, shell or console."""
    return [b for b in fenced_blocks(path) if b.lang in SHELL_LANGS]


def _marker_before(lines: list[str], fence_index: int) -> tuple[str | None, str | None]:
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    m = _MARKER.match(lines[k]) if k >= 0 else None
    if m is None:
        return None, None
    return m["kind"], m["arg"].strip()


def run_walk_through(
    doc: Path,
    test_path: str,
    home: Path,
    replace: dict[str, str],
    min_blocks: int = 1,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """A page's blocks marked `<!-- run: TEST_PATH -->`, run in order as written, in one bash, as a user
    would: HOME in `home`, the venv's rl2edge and python first on PATH, no PYTHONPATH from the test run.
    `replace` maps text the page must contain (plc-sim's port, a step budget) to what the test runs; a
    page that lost a block or a replaced text fails here. Asserts a clean exit, no traceback."""
    blocks = [b for b in shell_blocks(doc) if b.marker_kind == "run" and b.marker_arg == test_path]
    assert len(blocks) >= min_blocks, f"{doc.name} lost its run blocks ({len(blocks)} of {min_blocks})"
    script = "set -euo pipefail\n" + "\n".join(b.text for b in blocks)
    for old, new in replace.items():
        assert old in script, f"{doc.name}'s run blocks no longer contain {old!r}"
        script = script.replace(old, new)
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
    return proc
