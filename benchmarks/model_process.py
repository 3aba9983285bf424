"""What serve pays for running the model in its own process: `Policy.predict` in-process against the same
artifact's predict through its model process (runtime.model_process), side by side, interleaved.

    python benchmarks/model_process.py --artifact demo-out/artifacts/int8   # the demo's CartPole int8
    python benchmarks/model_process.py                                      # and the Nature-CNN int8

The Nature-CNN artifact comes from the real export pipeline (benchmarks/synthetic.py). One thread per
interpreter. Writes benchmarks/results/model_process.{json,md,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.runtime.bench import artifact_observations, measure, percentiles_us


def compare(name: str, art: Path, calls: int) -> list[dict[str, Any]]:
    from rl2edge.runtime import Policy, load_manifest

    obs = artifact_observations(load_manifest(art).observation)
    inside = Policy.load(art)
    apart = Policy.load(art, isolate=True)
    i, j, k = (iter(range(1 << 62)) for _ in range(3))

    def after_warm_up() -> Any:  # as serve's loop calls it: the warm-up in the spin, then the cycle's call
        o = obs[next(k) % len(obs)]
        apart.warm_up(o)
        t0 = time.perf_counter_ns()
        apart.predict(o)
        return time.perf_counter_ns() - t0

    try:
        stats = measure(
            {
                "in-process predict": lambda: inside.predict(obs[next(i) % len(obs)]),
                "model-process predict, child asleep": lambda: apart.predict(obs[next(j) % len(obs)]),
            },
            calls,
        )
        stats["model-process predict after a warm-up"] = _timed(after_warm_up, calls)
    finally:
        apart.close()
    mode = inside.manifest.quantization["mode"]
    return [{"policy": f"{name} ({mode})", "form": form, **s} for form, s in stats.items()]


def _timed(call: Any, calls: int, warmup: int = 50) -> dict[str, float]:
    """Percentiles of what `call` returns (its own timing in ns, of the part that matters), in us."""
    for _ in range(warmup):
        call()
    return percentiles_us(np.array([call() for _ in range(calls)]) / 1e3)


def _nature_cnn_int8(tmp: Path) -> Path:
    from benchmarks.synthetic import synthetic_source
    from rl2edge.export.pipeline import ExportOptions, export_source

    out = tmp / "cnn"
    export_source(
        synthetic_source("cnn"),
        out,
        ExportOptions(quantize="int8", calib_episodes=2, eval_episodes=1, progress=False),
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", help="an artifact directory besides the Nature-CNN int8")
    ap.add_argument("--calls", type=int, default=5000, help="calls per form (default: 5000; the CNN a tenth)")
    ap.add_argument("--no-cnn", action="store_true", help="skip the Nature-CNN")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    rows: list[dict[str, Any]] = []
    if args.artifact:
        rows += compare(Path(args.artifact).name, Path(args.artifact), args.calls)
    if not args.no_cnn:
        with tempfile.TemporaryDirectory() as tmp:
            rows += compare("Nature-CNN 84x84x4", _nature_cnn_int8(Path(tmp)), max(args.calls // 10, 100))
    added: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["form"].startswith("model-process"):
            base = next(x for x in rows if x["policy"] == r["policy"] and x["form"] == "in-process predict")
            added[f"{r['policy']}, {r['form'][len('model-process predict') :].strip(', ')}"] = {
                k: r[k] - base[k] for k in ("p50", "p99")
            }
    md = (
        "`Policy.predict` in-process and through its model process (what `rl2edge serve` runs), one thread, "
        "microseconds per call. The first two interleaved; the model process's child sleeps between calls. "
        "After a warm-up: `Policy.warm_up` then the timed predict, as serve's loop calls them in the spin before "
        "each slot (the child stays awake for the cycle's call).\n\n"
        + markdown_table(
            ["policy", "form", "p50 us", "p99 us", "p99.9 us", "max us"],
            [
                [r["policy"], r["form"], *(f"{r[k]:.1f}" for k in ("p50", "p99", "p99.9", "max"))]
                for r in rows
            ],
        )
        + "\n\n"
        + "\n".join(
            f"- {p}: the model process adds {a['p50']:.1f} us p50, {a['p99']:.1f} us p99"
            for p, a in added.items()
        )
    )
    data = {"rows": rows, "added_us": added}
    write_results("model_process", data, md, Path(args.out))
    _plot(rows, Path(args.out) / "model_process.png")
    print(md)
    return data


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    forms = (
        "in-process predict",
        "model-process predict, child asleep",
        "model-process predict after a warm-up",
    )
    width = 0.8 / len(forms)
    for k, form in enumerate(forms):
        vals = [next(r["p50"] for r in rows if r["policy"] == p and r["form"] == form) for p in policies]
        ax.bar([i + (k - 1) * width for i in range(len(policies))], vals, width, label=form)
    ax.set_xticks(range(len(policies)), policies)
    ax.set_ylabel("p50 us per call")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Policy.predict: in-process vs the model's own process")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
