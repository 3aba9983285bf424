"""Data-parallel training on this machine: env steps/s and return of one process, of `train --nproc 2`, and of
two torchrun nodes of one process each (static rendezvous on loopback, as two machines would be started),
on the same total budget, side by side in one run (seeds interleaved).

    PYTHONPATH=. python benchmarks/train_scaling.py [--algos ppo,ppo_lstm] [--steps 30000] [--seeds 0,1]

Every run goes through the `rl2edge train` command (`torchrun` for the nodes), with the same config: the
preset plus `norm_obs_update: rollout`, the only statistics mode a data-parallel job has, so that the
process count is the only difference. steps/s is summary.json's (the training loop: the whole job's env
steps over its wall time); "command s" is the whole command's, process starts and the final evaluation
included. Writes benchmarks/results/train_scaling.{json,md,png}.

On a 2-core CPU two processes share the cores that one process's rollout and update already use, and the
per-update gather and all-reduce are extra work: the ratio is what this machine shows, not the 4-GPU case
(one GPU per process, the simulators' own cores), which no figure here stands for.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, plot_per_seed, write_results
from rl2edge.ports import free_port

_logger = logging.getLogger("benchmarks.train_scaling")
EXE = str(Path(sys.executable).with_name("rl2edge"))
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ENV = "CartPole-v1"
JOBS = ("1 process", "--nproc 2", "2 torchrun nodes x 1")


def torchrun_nodes(train_args: list[str], nodes: int = 2) -> list[list[str]]:
    """The commands of `nodes` torchrun agents of one process each, as `nodes` machines would run them (static
    rendezvous at node 0's address: loopback here), each starting `rl2edge <train_args>`."""
    rendezvous = ["--nnodes", str(nodes), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                  "--master-port", str(free_port())]  # fmt: skip
    return [
        [TORCHRUN, *rendezvous, "--node-rank", str(r), "--no-python", EXE, *train_args] for r in range(nodes)
    ]


def _train(job: str, algo: str, steps: int, seed: int, work: Path) -> dict[str, Any]:
    out = work / f"{algo}-{job.replace(' ', '_')}-s{seed}"
    config = work / "rollout.yml"
    config.write_text("norm_obs_update: rollout\n")
    args = ["train", "--algo", algo, "--env", ENV, "--steps", str(steps), "--seed", str(seed), "--device", "cpu",
            "--config", str(config), "--out", str(out), "--no-progress"]  # fmt: skip
    pipe: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    if job == "1 process":
        commands = [[EXE, *args]]
    elif job == "--nproc 2":
        commands = [[EXE, *args, "--nproc", "2"]]
    else:
        commands = torchrun_nodes(args)
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, **pipe) for c in commands]
    logs = [p.communicate(timeout=3600)[0] for p in procs]
    command_s = time.perf_counter() - t0
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{job} {algo} seed {seed} failed:\n" + "\n".join(log[-3000:] for log in logs))
    summary = json.loads((out / "summary.json").read_text())
    row = {
        "job": job,
        "algo": algo,
        "seed": seed,
        "world_size": summary["world_size"],
        "steps": summary["steps"],
        "steps_per_s": summary["steps_per_s"],
        "command_s": command_s,
        "return": summary["final_eval"]["mean_return"],
    }
    _logger.info("%s %s seed %d: %.0f steps/s, return %.1f, %.1f s", job, algo, seed, row["steps_per_s"],
                 row["return"], command_s)  # fmt: skip
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", default="ppo,ppo_lstm")
    p.add_argument("--steps", type=int, default=30_000, help="the whole job's env steps (default: 30000)")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="train_scaling")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    algos, seeds = args.algos.split(","), [int(s) for s in args.seeds.split(",")]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for algo in algos:
                for job in JOBS:
                    runs.append(_train(job, algo, args.steps, seed, Path(tmp)))
    rows = []
    for algo in algos:
        base = np.mean([r["steps_per_s"] for r in runs if r["algo"] == algo and r["job"] == JOBS[0]])
        for job in JOBS:
            mine = [r for r in runs if r["algo"] == algo and r["job"] == job]
            rate = [r["steps_per_s"] for r in mine]
            rows.append({
                "who": f"{algo}, {job}",
                "algo": algo,
                "job": job,
                "steps_per_s": rate,
                "mean": float(np.mean(rate)),
                "ratio": float(np.mean(rate) / base),
                "returns": [r["return"] for r in mine],
                "command_s": [r["command_s"] for r in mine],
            })  # fmt: skip
    body = [
        [r["algo"], r["job"], f"{r['mean']:.0f}", f"{r['ratio']:.2f}",
         " / ".join(f"{x:.1f}" for x in r["returns"]), f"{np.mean(r['returns']):.1f}",
         f"{np.mean(r['command_s']):.1f}"]
        for r in rows
    ]  # fmt: skip
    md = (
        f"{ENV}, {args.steps:,} env steps per job (all processes together), seeds {args.seeds}, CPU (gloo), one "
        "run, jobs interleaved per seed. The preset's hyperparameters with `norm_obs_update: rollout` in every "
        "job.\n\n"
        + markdown_table(
            ["algo", "job", "steps/s", "vs 1 process", "return per seed", "mean return", "command s"], body
        )
        + "\n\nsteps/s: summary.json's, the whole job's env steps over the training loop's wall time. "
        "This is a 2-core machine: two processes share the two cores one process already uses, so the ratio "
        "says what the gather and the all-reduce cost here, not what 4 GPUs give (the design's case). "
        "The returns differ between jobs because the rollouts' float rounding differs (each rank acts on its "
        "own envs' rows): the first update agrees within 1e-5 per weight (tests/test_data_parallel.py), later ones drift "
        "apart as any two runs of different rounding do."
    )
    data = {"env": ENV, "steps": args.steps, "seeds": seeds, "runs": runs, "rows": rows}
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot_per_seed(rows, "steps_per_s", "env steps/s (whole job)", f"Data-parallel training, {ENV}, CPU",
                  out / f"{args.name}.png", bottom=0)  # fmt: skip
    return data


if __name__ == "__main__":
    main()
