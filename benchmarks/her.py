"""Hindsight experience replay on a sparse-reward goal plant, side by side in one run: rl2edge's SAC with
HER (its int8 artifact), rl2edge's plain SAC, and Stable-Baselines3's SAC with its own HerReplayBuffer, on
the same budget, hyperparameters and seeds. Success: at the goal at the episode's last step.

    PYTHONPATH=. python benchmarks/her.py [--steps 3000] [--seeds 0,1,2] [--episodes 50]

The plant is testkit.goal_envs:PointReach (a point driven to a station; reward -1 per step away from it,
0 within 0.1; 50-step episodes). Writes benchmarks/results/her.{json,md,png}."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, plot_per_seed, write_results
from testkit.goal_envs import success_rate

_logger = logging.getLogger("benchmarks.her")
ENV = "testkit.goal_envs:PointReach"
HP = {"net_arch": [64, 64], "batch_size": 128, "learning_starts": 200}


def rl2edge_run(her: bool, seed: int, steps: int, episodes: int, work: Path) -> dict[str, Any]:
    from rl2edge.runtime import Policy
    from testkit.runs import export_run, tiny_train

    extra = {"replay_buffer_class": "HerReplayBuffer"} if her else {}
    t0 = time.perf_counter()
    run = tiny_train(ENV, work / f"{her}-{seed}", steps=steps, seed=seed, algo="sac", **HP, **extra)
    took = time.perf_counter() - t0
    export_run(run, work / f"{her}-{seed}-art", "int8")
    policy = Policy.load(work / f"{her}-{seed}-art")
    return {"success": success_rate(policy.predict, episodes), "train_s": took}


def sb3_run(seed: int, steps: int, episodes: int) -> dict[str, Any]:
    import gymnasium as gym
    from stable_baselines3 import SAC, HerReplayBuffer

    from testkit.goal_envs import PointReach

    env = gym.wrappers.TimeLimit(PointReach(), 50)
    kw = {"net_arch": HP["net_arch"]}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SAC("MultiInputPolicy", env, replay_buffer_class=HerReplayBuffer, policy_kwargs=kw, seed=seed,
                    batch_size=HP["batch_size"], learning_starts=HP["learning_starts"], device="cpu", verbose=0)  # fmt: skip
        model.learn(steps)
    took = time.perf_counter() - t0
    return {
        "success": success_rate(lambda o: model.predict(o, deterministic=True)[0], episodes),
        "train_s": took,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="her")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    seeds = [int(s) for s in args.seeds.split(",")]
    who = {
        "rl2edge SAC + HER (int8)": lambda s, w: rl2edge_run(True, s, args.steps, args.episodes, w),
        "rl2edge SAC, plain (int8)": lambda s, w: rl2edge_run(False, s, args.steps, args.episodes, w),
        "SB3 SAC + HerReplayBuffer": lambda s, w: sb3_run(s, args.steps, args.episodes),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="rl2edge-her-") as work:
        for name, fn in who.items():
            runs = [fn(seed, Path(work)) for seed in seeds]
            rates = [r["success"] for r in runs]
            _logger.info("%s: success %s", name, rates)
            rows.append({"who": name, "success": rates, "mean": float(np.mean(rates)),
                         "train_s": float(np.mean([r["train_s"] for r in runs]))})  # fmt: skip
    head = ["who", *[f"seed {s}" for s in seeds], "mean", "train s (mean)"]
    body = [[r["who"], *[f"{x:.2f}" for x in r["success"]], f"{r['mean']:.2f}", f"{r['train_s']:.0f}"]
            for r in rows]  # fmt: skip
    md = markdown_table(head, body) + (
        f"\n\nSuccess rate over {args.episodes} episodes (env seeds 100-{99 + args.episodes}) after "
        f"{args.steps:,} steps of SAC (net_arch {HP['net_arch']}, batch {HP['batch_size']}, learning_starts "
        f"{HP['learning_starts']}, otherwise SB3's defaults; HER: future, 4 sampled goals) on {ENV}. rl2edge's "
        "is its int8 artifact's; SB3's is its deterministic predict."
    )
    data = {
        "steps": args.steps,
        "seeds": seeds,
        "episodes": args.episodes,
        "hyperparameters": HP,
        "rows": rows,
    }
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot_per_seed(rows, "success", "success rate", f"{ENV}, {args.steps:,} steps", out / f"{args.name}.png",
                  bottom=-0.05, top=1.05)  # fmt: skip
    return data


if __name__ == "__main__":
    main()
