"""What every benchmark shares: the machine's description, result files (JSON + markdown + PNG) and
the reference figures of ../shared/REFERENCE.md that results are shown next to."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from rl2edge.fileio import write_bytes_atomic, write_json_atomic

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in ("rl2edge", "numpy", "asyncua", "ai-edge-litert", "onnxruntime", "torch", "tensorflow"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
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
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "versions": versions,
        "commit": commit,
    }


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


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


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2)
