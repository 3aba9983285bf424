"""Where CI's time goes: each stage's wall time and test count, the costliest tests, line coverage per tier.

Two uses:

    python benchmarks/ci_time.py --table DIR
        the table `.ci/run` ends with, from DIR/stages.tsv (name, seconds, exit code per stage) and the junit
        XML files pytest wrote there (one per pytest run: default.xml, integration-serial.xml, ...).
    python benchmarks/ci_time.py --before DIR --after DIR [--moved FILE]
        benchmarks/results/ci_time.{json,md,png}: two such folders side by side (a run before a change and
        one after), the 30 costliest tests of the second, the tests that ran in one and not the other, and
        line coverage where a folder holds coverage-<tier>.json (coverage.py's `json` report).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results

# Which junit files belong to which stage of .ci/run (a stage may run pytest twice: parallel, then serial).
STAGE_FILES = {
    "make test": ("default",),
    "make test-integration": ("integration",),
    "make test-edge": ("edge",),
}
TOP = 30


@dataclass(frozen=True)
class Case:
    id: str
    seconds: float
    outcome: str  # passed, failed, skipped


def read_cases(xml: Path) -> list[Case]:
    """Every test case of one junit XML file (pytest's), with its outcome."""
    cases = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        outcome = "passed"
        for child in tc:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        module = tc.get("classname", "").replace(".", "/")
        cases.append(Case(f"{module}.py::{tc.get('name')}", float(tc.get("time", 0.0)), outcome))
    return cases


def stage_cases(folder: Path, stage: str) -> list[Case]:
    prefixes = STAGE_FILES.get(stage, ())
    files = sorted(f for f in folder.glob("*.xml") if f.stem.split("-")[0] in prefixes)
    return [c for f in files for c in read_cases(f)]


def read_stages(folder: Path) -> list[dict[str, Any]]:
    """stages.tsv's rows with each stage's test counts."""
    rows = []
    path = folder / "stages.tsv"
    for line in path.read_text().splitlines() if path.is_file() else []:
        if line.count("\t") != 2:  # not a stage's row
            continue
        name, seconds, rc = line.split("\t")
        cases = stage_cases(folder, name)
        counts = {k: sum(c.outcome == k for c in cases) for k in ("passed", "failed", "skipped")}
        rows.append({"stage": name, "seconds": int(seconds), "exit": int(rc), "tests": len(cases), **counts})
    return rows


def table(folder: Path) -> str:
    rows = read_stages(folder)
    total = sum(r["seconds"] for r in rows)
    body = [
        [
            r["stage"],
            f"{r['seconds'] // 60}:{r['seconds'] % 60:02d}",
            r["tests"] or "",
            r["passed"] or "",
            r["failed"] or "",
            r["skipped"] or "",
            r["exit"],
        ]
        for r in rows
    ]
    body.append(["total", f"{total // 60}:{total % 60:02d}", sum(r["tests"] for r in rows), "", "", "", ""])
    return markdown_table(["stage", "wall m:s", "tests", "passed", "failed", "skipped", "exit"], body)


def coverage(folder: Path) -> dict[str, float]:
    """Line coverage (%) per tier, from coverage.py's JSON reports coverage-<tier>.json."""
    out = {}
    for f in sorted(folder.glob("coverage-*.json")):
        totals = json.loads(f.read_text())["totals"]
        out[f.stem.removeprefix("coverage-")] = round(float(totals["percent_covered"]), 2)
    return out


def all_cases(folder: Path) -> dict[str, Case]:
    return {c.id: c for f in sorted(folder.glob("*.xml")) for c in read_cases(f)}


def report(before: Path, after: Path, moved_note: Path | None, out_dir: Path) -> dict[str, Any]:
    b_cases, a_cases = all_cases(before), all_cases(after)
    costliest = sorted(a_cases.values(), key=lambda c: -c.seconds)[:TOP]
    gone = sorted(set(b_cases) - set(a_cases))
    new = sorted(set(a_cases) - set(b_cases))
    data = {
        "before": {"stages": read_stages(before), "coverage": coverage(before), "tests": len(b_cases)},
        "after": {"stages": read_stages(after), "coverage": coverage(after), "tests": len(a_cases)},
        "costliest_after": [c.__dict__ for c in costliest],
        "not_run_after": gone,
        "new_after": new,
        "moves": moved_note.read_text() if moved_note else "",
    }
    lines = ["# CI time", "", "Each stage of `.ci/run` on a clean clone, before and after.", ""]
    for side in ("before", "after"):
        lines += [f"## {side}", "", table(before if side == "before" else after), ""]
        cov = data[side]["coverage"]
        if cov:
            lines += [
                "Line coverage of the five packages: " + ", ".join(f"{k} {v} %" for k, v in cov.items()),
                "",
            ]
    lines += [
        f"## The {TOP} costliest tests after",
        "",
        markdown_table(["test", "s", "outcome"], [[c.id, f"{c.seconds:.1f}", c.outcome] for c in costliest]),
        "",
        f"## Tests that ran before and not after ({len(gone)})",
        "",
        *(f"- `{t}`" for t in gone),
        "",
    ]
    if moved_note:
        lines += ["## Moves and merges", "", moved_note.read_text().strip(), ""]
    write_results("ci_time", data, "\n".join(lines), out_dir)
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 7))
        ax.barh([c.id.split("::")[-1][:60] for c in costliest][::-1], [c.seconds for c in costliest][::-1])
        ax.set_xlabel("seconds")
        ax.set_title(f"The {TOP} costliest tests of CI")
        ax.tick_params(axis="y", labelsize=6)
        save_figure(fig, out_dir / "ci_time.png")
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--table", type=Path, help="print the stage table of one CI reports folder")
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path)
    parser.add_argument("--moved", type=Path, help="a markdown list of moved or merged tests, with reasons")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if not (args.before and args.after):
        parser.error("give --table DIR, or --before DIR and --after DIR")
    report(args.before, args.after, args.moved, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
