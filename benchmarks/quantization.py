"""What each quantization mode costs and buys, for trained policies: size, predict latency, action error
(agreement for discrete actions) and closed-loop return, next to fp32, from the export's own verification.

    python benchmarks/quantization.py                      # trains PPO on CartPole-v1 in torch and TF first
    python benchmarks/quantization.py --runs runs/a runs/b # existing run directories

Writes benchmarks/results/quantization.{json,md,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results


def _train_defaults(tmp: Path, steps: int) -> list[Path]:
    from rl2edge.train.algos import build_config, train

    runs = []
    for fw in ("torch", "tf"):
        run = tmp / f"CartPole-v1_ppo_{fw}"
        run.mkdir(parents=True)
        train(
            fw,
            "CartPole-v1",
            build_config("CartPole-v1", overrides={"n_timesteps": steps}),
            0,
            run,
            device="cpu",
            progress=False,
        )
        runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs", nargs="*", help="run directories (default: train CartPole-v1 PPO in torch and TF)"
    )
    ap.add_argument("--steps", type=int, default=100_000, help="steps of the default trainings")
    ap.add_argument("--episodes", type=int, default=20, help="closed-loop episodes per file")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from rl2edge.export.pipeline import ExportOptions, export_path

    results: list[dict[str, Any]] = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [Path(r) for r in args.runs] if args.runs else _train_defaults(Path(tmp), args.steps)
        for run in runs:
            report = export_path(
                run,
                Path(tmp) / "art" / run.name,
                ExportOptions(quantize="all", eval_episodes=args.episodes, progress=False),
            )
            fp32 = next(r for r in report.rows if r.mode == "fp32")
            for r in report.rows:
                p = r.parity
                err = (
                    f"agree {100 * p['agreement']:.1f}%"
                    if p["metric"] == "agreement"
                    else f"max {p['max_abs_error']:.2e} / mean {p['mean_abs_error']:.2e}"
                )
                rows.append(
                    [
                        run.name,
                        r.mode,
                        f"{r.size_bytes / 1024:.1f}",
                        f"{r.size_bytes / fp32.size_bytes:.2f}",
                        f"{r.latency['p50_us']:.1f}",
                        err,
                        f"{r.closed_loop['mean_return']:.1f} +- {r.closed_loop['std_return']:.1f}",
                        f"{r.closed_loop['mean_return'] - fp32.closed_loop['mean_return']:+.1f}",
                    ]
                )
                results.append({"run": run.name, **r.to_json()})
    md = (
        f"Each mode as exported and verified by `rl2edge export --quantize all` (held-out rollout observations; "
        f"closed loop over {args.episodes} episodes through the runtime).\n\n"
        + markdown_table(
            [
                "policy",
                "mode",
                "KB",
                "size vs fp32",
                "predict p50 us",
                "action error vs source",
                "return",
                "return - fp32",
            ],
            rows,
        )
    )
    data = {"files": results}
    write_results("quantization", data, md, Path(args.out))
    _plot(results, Path(args.out) / "quantization.png")
    print(md)
    return data


def _plot(results: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {path.name}")
        return

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for i, run in enumerate(dict.fromkeys(r["run"] for r in results)):
        sel = [r for r in results if r["run"] == run]
        ax.plot(
            [r["size_bytes"] / 1024 for r in sel],
            [r["closed_loop"]["mean_return"] for r in sel],
            "o-",
            color=f"C{i}",
            label=run,
        )
        for r in sel:
            ax.annotate(r["mode"], (r["size_bytes"] / 1024, r["closed_loop"]["mean_return"]), fontsize=7)
    ax.set_xlabel("policy.tflite size (KB)")
    ax.set_ylabel("closed-loop mean return")
    ax.legend(fontsize=7)
    ax.set_title("Quantization: size vs return")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
