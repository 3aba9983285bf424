"""`rl2edge trace plot`: one page a person reads at a glance. The observations against their training range,
the actions, the faults, the latency against the deadline and the drift score over time, as one PNG, or an
HTML page holding it with the trace's summary. matplotlib is the workstation's (not in the edge install)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.drift import DriftReference, drift_report
from rl2edge.plc_bridge.drift_config import DEFAULT_EVERY, DEFAULT_THRESHOLD, DEFAULT_WINDOW
from rl2edge.runtime.trace import Trace

SHOWN_DIMS = 6
"""Observation dimensions drawn: those that drift most."""


def rolling_drift(
    ref: DriftReference, obs: np.ndarray, window: int, every: int
) -> tuple[np.ndarray, np.ndarray]:
    """(observation index, score) of each window the monitor would score: serve's rule, offline."""
    ends = np.arange(window, len(obs) + 1, every)
    if not len(ends):
        return np.zeros(0, int), np.zeros(0)
    csum = np.cumsum(np.vstack([np.zeros((1, obs.shape[1])), obs]), axis=0)
    means = (csum[ends] - csum[ends - window]) / window
    scores = (np.abs(means - ref.mean) * ref.inv_std).max(axis=1)
    return ends - 1, scores


def figure(trace: Trace) -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError(
            "trace plot needs matplotlib (the workstation install); trace show needs nothing"
        ) from None
    recs = trace.records
    cycles = np.asarray([r["cycle"] for r in recs])
    obs, idx = trace.observations()
    ref = DriftReference.from_data(trace.header)
    fig, axes = plt.subplots(5, 1, figsize=(11, 12), sharex=True)
    ax = axes[0]
    if len(obs):
        z = (obs - ref.mean) * ref.inv_std
        order = np.argsort(-np.abs(z.mean(axis=0)))[:SHOWN_DIMS]
        for d in order:
            ax.plot(cycles[idx], z[:, d], lw=0.8, label=ref.names[d])
        if ref.low is not None and ref.high is not None:
            lo = ((ref.low - ref.mean) * ref.inv_std)[order].min()
            hi = ((ref.high - ref.mean) * ref.inv_std)[order].max()
            ax.axhspan(lo, hi, color="0.9", zorder=0, label="calibration range")
        ax.legend(fontsize=7, ncol=4, loc="upper left")
    ax.set_ylabel(f"observation\n(std of the {ref.basis} data)")
    ax.set_title(f"trace {trace.folder}: {len(recs)} cycles")
    actions = np.asarray([r["action"] for r in recs], float)
    axes[1].plot(cycles, actions, lw=0.8, drawstyle="steps-post")
    axes[1].set_ylabel("action written")
    statuses = sorted({r["status"] for r in recs} - {"OK"})
    for k, name in enumerate(statuses):
        at = cycles[[r["status"] == name for r in recs]]
        axes[2].scatter(at, np.full(len(at), k), s=6, label=name)
    labels = statuses or ["no fault"]
    axes[2].set_yticks(range(len(labels)), labels)
    axes[2].set_ylabel("faults")
    lat = np.asarray([r["latency_ms"] for r in recs], float)
    axes[3].plot(cycles, lat, lw=0.6)
    deadline = trace.header.get("deadline_ms")
    if deadline:
        axes[3].axhline(deadline, color="red", lw=0.8, label=f"deadline {deadline:g} ms")
        axes[3].legend(fontsize=7)
    axes[3].set_ylabel("latency ms")
    at, scores = rolling_drift(
        ref, obs.astype(np.float64), min(DEFAULT_WINDOW, max(2, len(obs))), DEFAULT_EVERY
    )
    axes[4].plot(cycles[idx][at] if len(at) else [], scores, marker=".", lw=0.8)
    axes[4].axhline(DEFAULT_THRESHOLD, color="red", lw=0.8, label=f"threshold {DEFAULT_THRESHOLD:g}")
    axes[4].set_ylabel("drift score")
    axes[4].set_xlabel("cycle")
    axes[4].legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_report(trace: Trace, out: Path) -> None:
    """A .png, or an .html page with the picture inline and the summary beside it (one self-contained file)."""
    from rl2edge.fileio import write_bytes_atomic

    if out.suffix not in (".png", ".html"):
        raise ConfigError(f"trace plot --out {out}: give a .html or a .png file")
    fig = figure(trace)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    png = buf.getvalue()
    if out.suffix == ".png":
        write_bytes_atomic(out, png)
        return
    summary = trace.summary()
    obs, _ = trace.observations()
    drift = drift_report(trace.header, obs)
    rows = [
        ("cycles", summary["cycles"]),
        ("episode starts", summary["episodes"]),
        ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items()))),
        (
            "latency p50 / p99 / max ms",
            " / ".join("-" if v is None else f"{v:.2f}" for v in summary["latency_ms"].values()),
        ),
        ("policies", ", ".join(summary["policies"])),
        ("drift score", "-" if drift.get("score") is None else f"{drift['score']:.2f}"),
        ("drift per key", ", ".join(f"{k} {v:.2f}" for k, v in (drift.get("per_key") or {}).items())),
    ]
    cells = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rl2edge trace {html.escape(str(trace.folder))}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} th{{text-align:left;padding-right:1em}}</style></head>
<body><h1>Trace {html.escape(str(trace.folder))}</h1>
<table id="summary">{cells}</table>
<img id="plot" alt="observations, actions, faults, latency and drift over the trace's cycles"
 src="data:image/png;base64,{base64.b64encode(png).decode()}">
</body></html>
"""
    write_bytes_atomic(out, page.encode())
