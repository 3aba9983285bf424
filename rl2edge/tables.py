"""What the CLI, the export report and the benchmarks print: markdown tables and package versions.
Standard library only, so that the runtime on the device uses it too."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from importlib import metadata
from typing import Any


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], pad: bool = False) -> str:
    """A markdown table; `pad` aligns the columns for a terminal (the CLI's summaries)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    if not pad:
        return "\n".join(
            ["| " + " | ".join(cells[0]) + " |", "|" + "|".join("---" for _ in headers) + "|"]
            + ["| " + " | ".join(r) + " |" for r in cells[1:]]
        )
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def package_versions(names: Iterable[str], missing: str | None = None) -> dict[str, str]:
    """Installed versions of `names`; a missing package gets `missing`, or is left out when it is None."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if missing is not None:
                out[name] = missing
    return out
