"""What every benchmark shares: the machine's description, result files (JSON + markdown + PNG) and
the reference figures of benchmarks/reference.md that results are shown next to."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from rl2edge.fileio import write_bytes_atomic, write_json_atomic
from rl2edge.runtime.bench import machine as runtime_machine
from rl2edge.tables import markdown_table, package_versions

__all__ = ["RESULTS", "machine", "markdown_table", "plot_per_seed", "pyplot", "save_figure", "write_results"]

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """runtime.bench's description of the machine (what the device reports too), plus the training stack's
    versions and the commit."""
    versions = package_versions(("onnxruntime", "torch", "tensorflow"))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).parent,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    base = runtime_machine()
    return {**base, "os": platform.platform(), "versions": {**base["versions"], **versions}, "commit": commit}


def write_results(
    name: str, data: dict[str, Any], markdown: str, out_dir: Path = RESULTS
) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    write_json_atomic(json_path, {"machine": machine(), **data})
    write_bytes_atomic(md_path, (markdown + "\n").encode())
    return json_path, md_path


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend, or None where matplotlib is not installed (the edge
    install measures artifacts without a plotting stack): the caller then skips its PNG."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)


def plot_per_seed(
    rows: list[dict[str, Any]], values: str, ylabel: str, title: str, path: Path, **ylim: Any
) -> None:
    """One column of dots per row (`row[values]`: one per seed), the mean as a bar across it; the x labels
    are the rows' `who`. Nothing where matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    for i, r in enumerate(rows):
        ax.scatter([i] * len(r[values]), r[values], color="tab:blue")
        ax.hlines(r["mean"], i - 0.2, i + 0.2, color="black")
    ax.set_xticks(range(len(rows)), [r["who"] for r in rows], fontsize=7)
    ax.set_ylabel(ylabel)
    if ylim:
        ax.set_ylim(**ylim)
    ax.set_title(title)
    save_figure(fig, path)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2)
