"""Rollout scaling: PPO env steps/s on a deliberately slow environment (CartPole whose step sleeps 1 ms,
standing in for a simulator), in one process and with 1 and 2 Ray rollout workers, side by side in one
run; and what N machines would give, from the measured costs.

    python benchmarks/rollout_scaling.py [--steps 16384] [--delay-ms 1] [--repeats 2]

Model (fitted to the measured runs, stated in the markdown): one update takes T(N) = A / N + B seconds,
A the env stepping that N workers share (n_steps x n_envs x the step's cost), B what does not shrink
with N (the learner's gradient steps, the weight broadcast and gathering the rollouts, each worker's
forward passes). A and B come from the 1- and 2-worker runs; T(8) is the projection for 8 nodes, one
worker each. Writes benchmarks/results/rollout_scaling.{json,md,png}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results  # noqa: E402

ENV = "benchmarks.slow_env:SlowCartPole"
# CartPole's preset (8 envs x 32 steps, 20 epochs of 256-minibatches) with 64 steps per rollout: the shape
# of a slow-simulator run, where env time dominates an update.
CONFIG = {"n_envs": 8, "n_steps": 64, "eval_freq": 0, "eval_episodes": 1, "norm_obs_update": "rollout"}


def env_step_cost(n: int = 500) -> float:
    from rl2edge.train.core.envs import make_env

    env = make_env(ENV)
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(n):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    return (time.perf_counter() - start) / n


def one_run(workers: int, steps: int) -> dict[str, Any]:
    from rl2edge.train.algos import build_config, train

    cfg = build_config(ENV, None, {"n_timesteps": steps, **CONFIG}, algo="ppo")
    with tempfile.TemporaryDirectory() as tmp:
        r = train(
            "torch", ENV, cfg, 0, Path(tmp) / "run", device="cpu", progress=False, rollout_workers=workers
        )
    return {"workers": workers, "steps": r.steps, "wall_s": r.wall_time_s, "steps_per_s": r.steps_per_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16384)
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    os.environ["SLOW_ENV_DELAY_S"] = str(args.delay_ms / 1000)

    from rl2edge.train.distributed.cluster import ray_session

    # The workers import the slow env from this repository (ray_session puts the working directory on their
    # path) and inherit SLOW_ENV_DELAY_S from this process; 3 CPUs: 2 workers and the learner.
    os.chdir(ROOT)
    step_cost = env_step_cost()
    runs: list[dict[str, Any]] = []
    with ray_session(num_cpus=3):
        for rep in range(args.repeats):  # interleaved, so drift hits every contender alike
            for workers in (0, 1, 2):
                runs.append({**one_run(workers, args.steps), "repeat": rep})
                print(runs[-1], flush=True)

    batch = CONFIG["n_envs"] * CONFIG["n_steps"]
    best = {w: max(r["steps_per_s"] for r in runs if r["workers"] == w) for w in (0, 1, 2)}
    t1, t2 = batch / best[1], batch / best[2]
    a, b = 2 * (t1 - t2), 2 * t2 - t1
    projection = {n: batch / (a / n + b) for n in (1, 2, 4, 8)}
    # What crosses the network per update: the segments (obs and raw obs 16 B, action 8, log-prob 4, value 4,
    # reward 8, done 1, bootstrap mask 1 and value 4 per transition) and the weights (64x64 actor and critic).
    segment_bytes = batch * (16 + 16 + 8 + 4 + 4 + 8 + 1 + 1 + 4)
    weight_bytes = 4 * (2 * (4 * 64 + 64 + 64 * 64 + 64) + 64 * 2 + 2 + 64 + 1)
    floor = CONFIG["n_steps"] * step_cost  # one env per worker: n_steps steps in a row, nothing shared
    data = {
        "env": ENV,
        "delay_ms": args.delay_ms,
        "config": CONFIG,
        "steps": args.steps,
        "env_step_cost_s": step_cost,
        "runs": runs,
        "best_steps_per_s": {("single process" if w == 0 else f"{w} workers"): v for w, v in best.items()},
        "model": {"A_s": a, "B_s": b, "update_s_single": batch / best[0]},
        "projection_steps_per_s": projection,
    }
    names = {0: "one process", 1: "1 rollout worker", 2: "2 rollout workers"}
    rows = [
        [names[w], f"{best[w]:.0f}", f"{best[w] / best[0]:.2f}x", f"{1000 * batch / best[w]:.0f}"]
        for w in (0, 1, 2)
    ]
    md = "\n".join(
        [
            "# Rollout scaling: PPO on a slow environment",
            "",
            f"CartPole-v1 whose step sleeps {args.delay_ms:g} ms (measured step cost {1000 * step_cost:.2f} ms), "
            f"PPO torch, {CONFIG['n_envs']} envs x {CONFIG['n_steps']} steps per update ({batch} transitions), "
            f"{args.steps} env steps per run, best of {args.repeats} interleaved repeats. One machine ({os.cpu_count()} "
            "cores); each worker is a Ray actor with its share of the envs and a copy of the policy.",
            "",
            markdown_table(["rollouts", "env steps/s", "vs one process", "ms per update"], rows),
            "",
            "## What more machines would give",
            "",
            f"Fitted to the 1- and 2-worker runs, one update takes T(N) = A/N + B with A = {a:.3f} s (env stepping, "
            f"shared by the workers) and B = {b:.3f} s (the learner's 20 epochs of gradient steps, the weight "
            "broadcast, gathering the segments, the workers' forward passes). Projected env steps/s:",
            "",
            markdown_table(
                ["workers (one per node)", "env steps/s (projected)"],
                [[n, f"{v:.0f}"] for n, v in projection.items()],
            ),
            "",
            f"With 8 envs, 8 nodes hold one env each: a rollout is then {CONFIG['n_steps']} steps of one env in a row "
            f"({1000 * floor:.0f} ms at the measured step cost), and B stays; beyond that, more envs per run (n_envs) "
            "and not more nodes is what scales. Across machines, add the network: a segment of this run is "
            f"{segment_bytes / 1000:.0f} kB and the weights {weight_bytes / 1000:.0f} kB, under a millisecond on a 1 Gbit/s link per "
            "update, next to B. The learner's update does not shrink with N: with a fast simulator (B dominating), "
            "workers do not pay.",
        ]
    )
    out = Path(args.out)
    write_results("rollout_scaling", data, md, out)
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = ["one process", "1 worker", "2 workers"]
        ax.bar(xs, [best[0], best[1], best[2]], color=["gray", "tab:blue", "tab:blue"], label="measured")
        ax.plot(
            ["1 worker", "2 workers"],
            [projection[1], projection[2]],
            "k--",
            marker="o",
            label="model A/N + B",
        )
        ax.set_ylabel("env steps / s")
        ax.set_title(
            f"PPO rollouts on a {args.delay_ms:g} ms/step env; 8 nodes projected: {projection[8]:.0f}/s"
        )
        ax.legend()
        save_figure(fig, out / "rollout_scaling.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
