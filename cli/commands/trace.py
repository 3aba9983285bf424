"""`rl2edge trace`: what serve's flight recorder wrote (`serve --record DIR`), read back: a summary, and the
trace written out for other tools (runtime.trace is the format)."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import Any

from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    t = sub.add_parser(
        "trace",
        help="read what serve --record wrote: summary, plot, export",
        formatter_class=fmt,
        description="A flight recorder's trace (the folder serve --record wrote): `show` sums it up (cycles, "
        "episodes, statuses, latency, the policies that served, each observation key's drift from the calibration "
        "data); `plot` draws one page of it; `export` writes it as one table for pandas, DuckDB or a spreadsheet.",
        epilog="examples:\n  rl2edge trace show /var/lib/rl2edge/trace\n"
        "  rl2edge trace plot /var/lib/rl2edge/trace --out report.html\n"
        "  rl2edge trace export /var/lib/rl2edge/trace --csv trace.csv\n"
        "  rl2edge trace export /var/lib/rl2edge/trace --parquet trace.parquet   # needs pyarrow",
    )
    verbs = t.add_subparsers(dest="verb", metavar="{show,plot,export}", required=True)
    show = verbs.add_parser("show", help="a summary of the trace", formatter_class=fmt)
    show.add_argument("trace", help="the folder serve --record wrote")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=run_show)
    plot = verbs.add_parser(
        "plot", help="one page: observations, actions, faults, latency, drift", formatter_class=fmt
    )
    plot.add_argument("trace", help="the folder serve --record wrote")
    plot.add_argument("--out", required=True, help="report.html (the picture and the summary) or report.png")
    plot.set_defaults(func=run_plot)
    export = verbs.add_parser(
        "export", help="the trace as one table (one row per cycle)", formatter_class=fmt
    )
    export.add_argument("trace", help="the folder serve --record wrote")
    out = export.add_mutually_exclusive_group(required=True)
    out.add_argument("--csv", metavar="FILE", help="write CSV")
    out.add_argument(
        "--parquet", metavar="FILE", help="write Parquet (needs pyarrow: the workstation install)"
    )
    export.set_defaults(func=run_export)


def run_show(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.drift import drift_report
    from rl2edge.runtime.trace import read_trace

    trace = read_trace(args.trace)
    summary = trace.summary()
    obs, _ = trace.observations()
    summary["drift"] = drift_report(trace.header, obs)
    if args.json:
        print(json.dumps(summary))
        return 0
    lat = summary["latency_ms"]
    rows: list[list[object]] = [
        ["cycles", summary["cycles"]],
        ["segments (torn lines skipped)", f"{summary['segments']} ({summary['torn_lines']})"],
        ["episode starts, state resets", f"{summary['episodes']}, {summary['state_resets']}"],
        ["statuses", ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items()))],
        ["latency p50 / p99 / max ms", " / ".join("-" if v is None else f"{v:.2f}" for v in lat.values())],
        ["policies (manifest sha256, cycles)", ", ".join(f"{k} {v}" for k, v in summary["policies"].items())],
    ]
    drift = summary["drift"]
    if drift.get("score") is not None:
        unit = "raw units" if drift["basis"] == "raw" else f"std of the {drift['basis']} data"
        rows.append(
            [f"drift per key ({unit})", ", ".join(f"{k} {v:.2f}" for k, v in drift["per_key"].items())]
        )
        if drift.get("outside_calibration_range") is not None:
            rows.append(
                ["outside the calibration range", f"{100 * drift['outside_calibration_range']:.1f} %"]
            )
    print(table(["trace " + str(trace.folder), ""], rows))
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.trace_report import write_report
    from rl2edge.runtime.trace import read_trace

    write_report(read_trace(args.trace), Path(args.out))
    print(f"trace {args.trace} -> {args.out}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from rl2edge.fileio import write_bytes_atomic
    from rl2edge.runtime.trace import read_trace

    trace = read_trace(args.trace)
    columns = _columns(trace)
    target = Path(args.csv or args.parquet)
    if args.parquet:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                "trace export --parquet needs pyarrow (pip install pyarrow, or the workstation's install); "
                "--csv needs nothing"
            ) from None
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table(columns), sink)
        write_bytes_atomic(target, sink.getvalue().to_pybytes())
    else:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(list(columns))
        writer.writerows(zip(*columns.values(), strict=True))
        write_bytes_atomic(target, text.getvalue().encode())
    print(f"{len(trace.records)} cycles, {len(columns)} columns -> {target}")
    return 0


def _columns(trace: Any) -> dict[str, list[Any]]:
    """One column per field and per observation and action value: obs.<key>.<i>, action.<i>."""
    recs = trace.records
    cols: dict[str, list[Any]] = {
        name: [r.get(name) for r in recs]
        for name in (
            "t",
            "cycle",
            "seq",
            "episode_start",
            "status",
            "code",
            "latency_ms",
            "policy",
            "predicted",
            "reset",
        )
    }
    cols["seq"] = [None if v is None else str(v) for v in cols["seq"]]
    offset = 0
    for key, size in trace.observation_keys:
        for i in range(size):
            cols[f"obs.{key}.{i}"] = [None if r.get("obs") is None else r["obs"][offset + i] for r in recs]
        offset += size
    width = max((len(r["action"]) for r in recs), default=0)
    for i in range(width):
        cols[f"action.{i}"] = [r["action"][i] if i < len(r["action"]) else None for r in recs]
    return cols
