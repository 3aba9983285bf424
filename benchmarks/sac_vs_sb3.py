"""SAC next to Stable-Baselines3's SAC on a plant neither project tuned to, in one run: the same env, budget,
hyperparameters (SB3's defaults: 256x256, batch 256, lr 3e-4, learning_starts 100, one gradient step per
env step, no observation normalization: rl2edge's own default normalizes, so it is turned off here) and
seeds, runs interleaved seed by seed so that the machine's load falls on both alike.

    PYTHONPATH=. python benchmarks/sac_vs_sb3.py [--env HalfCheetah-v5] [--steps 10000] [--seeds 0,1,2]

rl2edge's return is its int8 artifact's through the runtime (`Policy.predict`); SB3's is its deterministic
`predict`; both over the same evaluation episodes (env seeds 1000..). The budget is what a 2-core machine
runs in minutes: far short of the 1M steps the RL Zoo trains HalfCheetah for (about 9,500 there), so the
figure compares the two at the start of learning, not at convergence. Writes
benchmarks/results/sac_vs_sb3.{json,md,png}."""

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

_logger = logging.getLogger("benchmarks.sac_vs_sb3")
EVAL_SEED = 1000


def rl2edge_run(env_id: str, seed: int, steps: int, episodes: int, work: Path) -> dict[str, Any]:
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.runs import export_run, tiny_train

    t0 = time.perf_counter()
    # SB3's SAC has no observation normalization; rl2edge's default has it (VecNormalize-like): off here
    run = tiny_train(env_id, work / f"run-{seed}", steps=steps, seed=seed, algo="sac", normalize_obs=False)
    took = time.perf_counter() - t0
    export_run(run, work / f"art-{seed}", "int8")
    policy = Policy.load(work / f"art-{seed}")
    return {"returns": evaluate(policy.predict, env_id, episodes, EVAL_SEED).returns, "train_s": took}


def sb3_run(env_id: str, seed: int, steps: int, episodes: int) -> dict[str, Any]:
    import gymnasium as gym
    from stable_baselines3 import SAC

    from rl2edge.train.core.evaluation import evaluate

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SAC("MlpPolicy", gym.make(env_id), seed=seed, device="cpu", verbose=0)
        model.learn(steps)
    took = time.perf_counter() - t0
    act = lambda o: model.predict(o, deterministic=True)[0]  # noqa: E731
    return {"returns": evaluate(act, env_id, episodes, EVAL_SEED).returns, "train_s": took}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="HalfCheetah-v5")
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="sac_vs_sb3")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {"rl2edge SAC (torch, int8 file)": [], "SB3 SAC (predict)": []}
    with tempfile.TemporaryDirectory(prefix="rl2edge-sac-sb3-") as work:
        for seed in seeds:  # interleaved: a slow minute of the machine falls on both
            runs["rl2edge SAC (torch, int8 file)"].append(
                rl2edge_run(args.env, seed, args.steps, args.episodes, Path(work))
            )
            runs["SB3 SAC (predict)"].append(sb3_run(args.env, seed, args.steps, args.episodes))
            _logger.info("seed %d: %s", seed, {k: np.mean(v[-1]["returns"]) for k, v in runs.items()})
    rows = []
    for who, per_seed in runs.items():
        means = [float(np.mean(r["returns"])) for r in per_seed]
        rows.append({"who": who, "per_seed": means, "mean": float(np.mean(means)), "std": float(np.std(means)),
                     "train_s": float(np.mean([r["train_s"] for r in per_seed])),
                     "steps_per_s": args.steps / float(np.mean([r["train_s"] for r in per_seed]))})  # fmt: skip
    head = ["who", *[f"seed {s}" for s in seeds], "mean +- std over seeds", "train s", "steps/s"]
    body = [[r["who"], *[f"{x:.1f}" for x in r["per_seed"]], f"{r['mean']:.1f} +- {r['std']:.1f}",
             f"{r['train_s']:.0f}", f"{r['steps_per_s']:.0f}"] for r in rows]  # fmt: skip
    md = markdown_table(head, body) + (
        f"\n\n{args.env}, {args.steps:,} env steps of SAC per seed with SB3's default hyperparameters in both "
        f"(rl2edge's are SB3's but for its observation normalization, turned off here; no preset for this env), "
        f"seeds {args.seeds}, runs interleaved. Return: "
        f"the mean over {args.episodes} deterministic episodes (env seeds {EVAL_SEED}..), rl2edge's from its "
        "int8 artifact. A 2-core CPU budget: the RL Zoo trains HalfCheetah for 1M steps (about 9,500); "
        "this compares the two early in learning."
    )
    data = {"env": args.env, "steps": args.steps, "seeds": seeds, "episodes": args.episodes, "rows": rows}
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot_per_seed(
        rows, "per_seed", "return", f"SAC on {args.env}, {args.steps:,} steps", out / f"{args.name}.png"
    )
    return data


if __name__ == "__main__":
    main()
