"""Each Python snippet of the docs runs as pasted (issue 52: docs/serving.md's never defined `observation`).
Every ```python block is marked like the shell blocks; those marked `<!-- run: tests/test_docs_python.py -->`
run here, in a fresh interpreter, in a folder that holds what the docs' commands make first
(artifacts/cp: `rl2edge export runs/cp --quantize int8 --out artifacts/cp`, docs/serving.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "examples" / "agv" / "README.md"]
THIS = "tests/test_docs_python.py"
RUN = [(doc, b) for doc in DOCS for b in fenced_blocks(doc) if b.lang == "python" and b.marker_kind == "run"]


def test_every_python_block_is_marked() -> None:
    unmarked = [
        f"{doc.relative_to(ROOT)}:{b.line}"
        for doc in DOCS
        for b in fenced_blocks(doc)
        if b.lang == "python" and (b.marker_kind is None or (b.marker_kind == "not run" and not b.marker_arg))
    ]
    assert not unmarked, (
        f"```python blocks without <!-- run: {THIS} --> or <!-- not run: REASON -->: {unmarked}"
    )
    assert all(b.marker_arg == THIS for _, b in RUN)  # run by this file, and by no other
    assert any(doc.name == "serving.md" for doc, _ in RUN)


@pytest.mark.parametrize(("doc", "block"), RUN, ids=[f"{d.name}:{b.line}" for d, b in RUN])
def test_a_python_block_runs_as_pasted(cartpole_all, tmp_path: Path, doc: Path, block) -> None:
    shutil.copytree(cartpole_all[1] / "int8", tmp_path / "artifacts" / "cp")
    proc = subprocess.run(
        [sys.executable, "-c", block.text], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{doc.name}:{block.line}\n{proc.stderr[-3000:]}"
