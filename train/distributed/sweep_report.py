"""A sweep's table of trials: sweep.json, sweep.md and sweep.png (evaluation return over env steps)."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

from rl2edge.fileio import write_bytes_atomic, write_json_atomic
from rl2edge.tables import markdown_table

_logger = logging.getLogger(__name__)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 0.01 or abs(v) >= 1e4 else f"{v:.4g}"
    return str(v)


def table_rows(report: dict[str, Any], rows: list[Any]) -> tuple[list[str], list[list[str]]]:
    names = sorted({k for r in rows for k in r.hyperparameters})
    headers = ["trial", *names, "status", "steps", "best periodic eval", "final eval", "run"]
    best_id = (report.get("best") or {}).get("trial_id")
    order = sorted(rows, key=lambda r: -(r.final_eval if r.final_eval is not None else float("-inf")))
    out = []
    for r in order:
        status = r.status if r.error is None else f"error: {r.error[:80]}"
        out.append(
            [
                r.trial_id + (" (best)" if r.trial_id == best_id else ""),
                *(_fmt(r.hyperparameters.get(n)) for n in names),
                status,
                _fmt(r.steps),
                _fmt(r.best_periodic_eval),
                _fmt(r.final_eval),
                r.run_dirs[0]
                if len(r.run_dirs) == 1
                else (f"{len(r.run_dirs)} seeds" if r.run_dirs else "-"),
            ]
        )
    return headers, out


def markdown(report: dict[str, Any], rows: list[Any]) -> str:
    headers, body = table_rows(report, rows)
    st = report["status"]
    saved = report["asha_saved_fraction"]
    est = report.get("estimated_wall_time_without_early_stopping_s")
    lines = [
        f"# Sweep: {report['algo'].upper()} ({report['framework']}) on {report['env_id']}",
        "",
        f"{report['trials']} trials x {len(report['seeds'])} seed(s) x up to {report['max_steps_per_trial']} env "
        f"steps; {st['complete']} complete, {st['stopped early']} stopped early by ASHA, {st['error']} failed"
        + (f", {st['interrupted']} interrupted (continue with --resume)" if st.get("interrupted") else "")
        + ". "
        f"Wall time {report['wall_time_s']:.0f} s.",
        "",
        f"ASHA ran {report['env_steps_run']} of {report['env_steps_without_early_stopping']} env steps "
        f"({100 * saved:.0f}% saved)"
        + (
            f"; at this sweep's rate every trial to the end would have taken about {est:.0f} s."
            if est
            else "."
        ),
        "",
        markdown_table(headers, body),
    ]
    if report.get("retried_trials"):
        lines += ["", f"Retried after a crash or a lost node: {', '.join(report['retried_trials'])}."]
    best = report.get("best")
    if best:
        lines += [
            "",
            f"Best: trial {best['trial_id']}, final eval {best['final_eval']:.1f}: `{best['run_dir']}`",
        ]
        lines += [
            "",
            f"    rl2edge export {best['run_dir']} --quantize int8 --out artifacts/{report['env_id']}-best",
        ]
    return "\n".join(lines) + "\n"


def plot_png(report: dict[str, Any], rows: list[Any]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    best_id = (report.get("best") or {}).get("trial_id")
    for r in rows:
        if not r.history:
            continue
        steps, values = zip(*r.history, strict=True)
        style = {"lw": 2.5, "color": "black"} if r.trial_id == best_id else {"lw": 1, "alpha": 0.7}
        ax.plot(steps, values, marker="o", ms=3, label=f"{r.trial_id} ({r.status})", **style)
    ax.set_xlabel("env steps")
    ax.set_ylabel("evaluation return (mean over seeds)")
    ax.set_title(f"{report['algo'].upper()} {report['env_id']}: {report['trials']} trials, ASHA")
    ax.grid(alpha=0.3)
    if len(rows) <= 16:
        ax.legend(fontsize=7, ncol=2)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_report(out: Path, report: dict[str, Any], rows: list[Any]) -> None:
    write_json_atomic(out / "sweep.json", report)
    write_bytes_atomic(out / "sweep.md", markdown(report, rows).encode())
    try:
        write_bytes_atomic(out / "sweep.png", plot_png(report, rows))
    except ImportError:  # matplotlib is in [dev]; the table does not need it
        _logger.warning("matplotlib is not installed: no sweep.png")
