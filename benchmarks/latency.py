"""Inference latency: what a policy costs per call, in each form it can be served in.

    python benchmarks/latency.py --suite                 # MLP 64x64, MLP 256x256, Nature-CNN 84x84x4
    python benchmarks/latency.py --suite --policies mlp64,dict4   # flat vs 4-key Dict -> latency_mlp64_dict4.*
    python benchmarks/latency.py --artifact ARTIFACT     # one artifact, as `rl2edge bench latency ARTIFACT`
    rl2edge bench latency --suite                        # the suite, from the CLI (in a source checkout)

Forms (suite): torch eager, torch no-grad, ONNX Runtime, TFLite fp32 / fp16 / dynamic-range / int8 (bare
invoke), and the runtime's full `Policy.predict` (validation, int8 (de)quantization, clamping) for every
TFLite file; each with one thread and with all threads. Microseconds per call, p50/p99/p99.9/max over
`--calls` single-observation calls after a warm-up. The suite's artifacts come from the real export
pipeline (rollout calibration, verification). Writes benchmarks/results/latency.{json,md,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, pyplot, save_figure, write_results
from rl2edge.runtime.bench import artifact_forms, bench_artifact, latency_table, measure

MODES = ("fp32", "fp16", "dynamic", "int8")


def _suite_rows(kind: str, tmp: Path, calls: int, thread_counts: list[int]) -> list[dict[str, Any]]:
    import torch

    from benchmarks.synthetic import synthetic_source
    from rl2edge.export.pipeline import ExportOptions, export_source
    from rl2edge.runtime.interpreters import OnnxBackend
    from testkit.observations import random_observations

    source = synthetic_source(kind)
    out = tmp / kind
    export_source(
        source, out, ExportOptions(quantize="all", calib_episodes=2, eval_episodes=1, progress=False)
    )
    env_obs = random_observations(source.env_id, 64, seed=0)  # a Dict env's: mappings, as predict takes them
    flat = np.stack([source.observation.flatten(o) for o in env_obs]).astype(np.float32)
    graph_in = torch.as_tensor(source.policy.from_env_layout(flat[:1]))
    rows: list[dict[str, Any]] = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        keys = tuple(k.name for k in source.observation.keys)
        ort = OnnxBackend(out / "fp32" / "policy.onnx", num_threads=threads, observation_keys=keys)
        onnx_in = source.onnx_input(flat[:1])

        def no_grad() -> Any:
            with torch.inference_mode():
                return source.policy(graph_in)

        fns: dict[str, Callable[[], Any]] = {
            "torch eager": lambda: source.policy(graph_in),
            "torch no-grad": no_grad,
            "ONNX Runtime": lambda ort=ort, x=onnx_in: ort.run(x),
        }
        for mode in MODES:
            fns.update(artifact_forms(out / mode, env_obs, threads))
        rows += [{"form": name, "threads": threads, **stats} for name, stats in measure(fns, calls).items()]
    for r in rows:
        r["policy"] = {
            "mlp64": "MLP 64x64",
            "mlp256": "MLP 256x256",
            "dict4": "MLP 64x64, Dict of 4 keys",
            "cnn": "Nature-CNN 84x84x4",
        }[kind]
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--suite", action="store_true", help="MLP 64x64, MLP 256x256, Nature-CNN, every form")
    what.add_argument("--artifact", help="one artifact directory")
    ap.add_argument("--calls", type=int, default=0, help="calls per measurement (default: 3000 MLP, 500 CNN)")
    ap.add_argument("--policies", default="mlp64,mlp256,cnn", help="suite: which synthetic policies")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", help="--artifact: the results files' name (default: latency_artifact)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    thread_counts = sorted({1, os.cpu_count() or 1})
    rows: list[dict[str, Any]] = []
    if args.suite:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in args.policies.split(","):
                calls = args.calls or (500 if kind == "cnn" else 3000)
                rows += _suite_rows(kind, Path(tmp), calls, thread_counts)
    else:
        rows = bench_artifact(Path(args.artifact), args.calls or 3000, thread_counts)
    derived = _derived(rows)
    md = (
        "Latency per call in microseconds (single observation, after warm-up).\n\n"
        + latency_table(rows)
        + ("\n\n" + "\n".join(f"- {line}" for line in derived["lines"]) if derived["lines"] else "")
    )
    data = {"rows": rows, "derived": derived}
    name = args.name or "latency_artifact"
    if args.suite:  # the default suite is `latency`; another choice of policies writes files of its own
        chosen = args.policies.split(",")
        name = "latency" if chosen == ap.get_default("policies").split(",") else "latency_" + "_".join(chosen)
    write_results(name, data, md, Path(args.out))
    _plot(rows, Path(args.out) / f"{name}.png")
    print(md)
    return data


def _derived(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures (README, docs/benchmarks.md): int8 vs torch eager on the CNN; predict's overhead over invoke."""
    out: dict[str, Any] = {"lines": []}
    key = {(r["policy"], r["form"], r["threads"]): r for r in rows}
    cnn = "Nature-CNN 84x84x4"
    if (cnn, "torch eager", 1) in key and (cnn, "TFLite int8 invoke", 1) in key:
        speedup = key[(cnn, "torch eager", 1)]["p50"] / key[(cnn, "TFLite int8 invoke", 1)]["p50"]
        out["cnn_int8_vs_torch_eager_1thread"] = speedup
        out["lines"].append(
            f"Nature-CNN, one thread: TFLite int8 invoke is {speedup:.1f}x faster than torch eager (p50)."
        )
    overheads = {}
    for (policy, form, threads), r in key.items():
        if form.endswith(" predict") and threads == 1:
            invoke = key.get((policy, form.replace(" predict", " invoke"), 1))
            if invoke:
                overheads[f"{policy} | {form[:-8]}"] = r["p50"] - invoke["p50"]
    out["predict_overhead_us_1thread"] = overheads
    if overheads:
        vals = np.array(list(overheads.values()))
        out["lines"].append(
            f"Policy.predict over a bare invoke (one thread, p50): {vals.min():.1f} to {vals.max():.1f} us "
            "(validation, int8 (de)quantization, clamping)."
        )
    return out


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {path.name}")
        return

    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, axes = plt.subplots(len(policies), 1, figsize=(8, 2.8 * len(policies)), squeeze=False)
    for ax, policy in zip(axes[:, 0], policies, strict=True):
        sel = [r for r in rows if r["policy"] == policy]
        forms = list(dict.fromkeys(r["form"] for r in sel))
        threads = sorted({r["threads"] for r in sel})
        y = np.arange(len(forms))
        h = 0.8 / len(threads)
        for k, t in enumerate(threads):
            vals = [next((r for r in sel if r["form"] == f and r["threads"] == t), None) for f in forms]
            p50 = [v["p50"] if v else np.nan for v in vals]
            p99 = [v["p99"] - v["p50"] if v else 0 for v in vals]
            ax.barh(y + k * h, p50, h, xerr=[np.zeros(len(p99)), p99], label=f"{t} thread(s)", capsize=2)
        ax.set_yticks(y + h * (len(threads) - 1) / 2, forms, fontsize=7)
        ax.set_xscale("log")
        ax.set_title(policy, fontsize=9)
        ax.set_xlabel("us per call: p50 bar, p99 whisker")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    main()
