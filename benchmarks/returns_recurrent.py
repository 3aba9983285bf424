"""Recurrent policies on CartPoleNoVel-v1 (the velocities hidden) seed by seed: rl2edge's ppo_lstm and
a2c_lstm in both backends, each run exported to int8 and evaluated, against sb3-contrib's RecurrentPPO
trained with the same preset (train/presets/ppo_lstm.yml), the same seeds and the same budget, in one run.

    python benchmarks/returns_recurrent.py                       # 5 seeds, 100k steps, 20 episodes
    python benchmarks/returns_recurrent.py --seeds 0 --steps 20000 --episodes 5 --out /tmp/r   # a smoke run

Every return is the mean over `--episodes` evaluation episodes on the env seeds 0..episodes-1 (rl2edge:
the int8 file, export's closed-loop check; sb3-contrib: its own predict(obs, state, episode_start), state
carried, reset at each episode). Training's periodic evaluation, which picks rl2edge's checkpoint, runs on
the seeds from 10,000 on: the evaluation here is held out from that choice. Writes
benchmarks/results/returns_recurrent.{json,md,png}.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, pyplot, save_figure, write_results  # noqa: E402
from benchmarks.returns import run_cell  # noqa: E402
from benchmarks.train_throughput import run_one  # noqa: E402

ENV = "CartPoleNoVel-v1"
RL2EDGE = [("ppo_lstm", "torch"), ("ppo_lstm", "tf"), ("a2c_lstm", "torch"), ("a2c_lstm", "tf")]
TARGET = 450.0
"""The bar a user's one training run has to clear: int8 mean over 20 episodes, every seed."""


def contender_rows(
    seeds: list[int], steps: int, episodes: int, runs: Path, only: set[str] | None = None
) -> list[dict[str, Any]]:
    rows = []
    for algo, fw in RL2EDGE:
        if only is not None and f"{algo}:{fw}" not in only:
            continue
        per_seed = []
        for seed in seeds:
            cell = run_cell(algo, ENV, fw, seed, steps, runs, episodes)
            per_seed.append(cell)
            print(f"{algo}/{fw} seed {seed}: int8 {cell['int8_return']:.1f} (checkpoint {cell['checkpoint']})",
                  flush=True)  # fmt: skip
        rows.append(
            {
                "contender": f"rl2edge {algo} ({fw}), int8",
                "returns": [c["int8_return"] for c in per_seed],
                "source_returns": [c["source_return"] for c in per_seed],
                "checkpoints": [c["checkpoint"] for c in per_seed],
                "steps_per_s": float(np.mean([c["steps_per_s"] for c in per_seed])),
            }
        )
    if only is not None and "sb3" not in only:
        return rows
    sb3 = []
    for seed in seeds:
        r = run_one("sb3", ("sb3-contrib RecurrentPPO", "sb3", "ppo_lstm", {}), ENV, steps, seed, runs)
        sb3.append(r)
        print(f"sb3-contrib RecurrentPPO seed {seed}: {r['mean_return']:.1f}", flush=True)
    rows.append(
        {
            "contender": "sb3-contrib RecurrentPPO (torch, fp32)",
            "returns": [r["mean_return"] for r in sb3],
            "source_returns": [r["mean_return"] for r in sb3],
            "checkpoints": ["last"] * len(sb3),
            "steps_per_s": float(np.mean([r["steps_per_s"] for r in sb3])),
        }
    )
    return rows


def table(rows: list[dict[str, Any]], seeds: list[int], episodes: int) -> str:
    head = ["contender", *(f"seed {s}" for s in seeds), "mean", f"seeds >= {TARGET:g}", "train steps/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ret = r["returns"]
        cells = [r["contender"], *(f"{v:.1f}" for v in ret), f"{np.mean(ret):.1f}",
                 f"{sum(v >= TARGET for v in ret)}/{len(ret)}", f"{r['steps_per_s']:.0f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return (
        f"CartPoleNoVel-v1, {episodes} evaluation episodes per seed (env seeds 0..{episodes - 1}; sb3-contrib: "
        "always 20, its runner's in benchmarks/train_throughput.py), the ppo_lstm / a2c_lstm presets "
        "(sb3-contrib: the ppo_lstm preset, VecNormalize on the observations).\n\n" + "\n".join(lines)
    )


def plot(rows: list[dict[str, Any]], seeds: list[int], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        ax.bar([k + i * width for k in range(len(seeds))], r["returns"], width, label=r["contender"])
    ax.axhline(TARGET, color="k", lw=0.8, ls="--")
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(seeds))], [f"seed {s}" for s in seeds])
    ax.set_ylabel("mean return")
    ax.set_title("CartPoleNoVel-v1: recurrent policies, seed by seed")
    ax.legend(fontsize=7, loc="lower right")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--runs", help="where the runs and artifacts go (default: a temporary folder)")
    p.add_argument("--out", default=str(RESULTS), help="results folder")
    p.add_argument("--only", help="a subset of the contenders: ppo_lstm:torch,a2c_lstm:tf,sb3 (default: all)")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(args.runs) if args.runs else Path(tmp)
        only = set(args.only.split(",")) if args.only else None
        rows = contender_rows(seeds, args.steps, args.episodes, runs, only)
    out = Path(args.out)
    md = table(rows, seeds, args.episodes)
    data = {"env_id": ENV, "steps": args.steps, "episodes": args.episodes, "seeds": seeds, "rows": rows}
    write_results("returns_recurrent", data, md, out)
    plot(rows, seeds, out / "returns_recurrent.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
