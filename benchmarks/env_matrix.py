"""A conformance matrix on plants from other projects: each cell takes an algorithm through the commands a
user runs, `train`, an int8 `export`, `evaluate` and a lockstep `serve` over OPC UA against `plc-sim`, and
says whether it works (its return next to a random policy's on the same seeds, and whether the served
closed loop gave evaluate's return) or was refused, with the one-line reason. Short budgets: a cell shows
that the path works on that plant, not how well the algorithm solves it.

    PYTHONPATH=. python benchmarks/env_matrix.py [--cells NAME,...] [--episodes 5]

Writes benchmarks/results/env_matrix.{json,md,png}. The plants: Gymnasium's classic control, Box2D and
MuJoCo sets, highway-env, MiniGrid, a goal-conditioned one with HER, MultiDiscrete and MultiBinary
valves, and a camera alone (an image Box outside a Dict)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results

ROOT = Path(__file__).resolve().parents[1]

_logger = logging.getLogger("benchmarks.env_matrix")


@dataclass(frozen=True)
class Cell:
    name: str
    env: str
    origin: str
    algo: str
    steps: int
    hp: dict[str, Any] = field(default_factory=dict)
    stateful: bool = False  # serve maps plc-sim's EpisodeStart


CELLS = (
    Cell("cartpole-ppo", "CartPole-v1", "Gymnasium classic control", "ppo", 8192),
    Cell("cartpole-dqn", "CartPole-v1", "Gymnasium classic control", "dqn", 10_000),
    Cell("pendulum-sac", "Pendulum-v1", "Gymnasium classic control", "sac", 3000),
    Cell("pendulum-dqn", "Pendulum-v1", "Gymnasium classic control", "dqn", 1000),
    Cell("lunar-sac", "LunarLanderContinuous-v3", "Gymnasium Box2D", "sac", 5000),
    Cell("walker-td3", "BipedalWalker-v3", "Gymnasium Box2D", "td3", 3000),
    Cell("cheetah-sac", "HalfCheetah-v5", "Gymnasium MuJoCo (mujoco wheel)", "sac", 5000),
    Cell("highway-ppo", "highway_env:highway-fast-v0", "highway-env", "ppo", 512,
         {"n_steps": 64, "n_envs": 2, "batch_size": 64}),
    Cell("minigrid-ppo_lstm", "minigrid:MiniGrid-MemoryS7-v0", "MiniGrid, as registered", "ppo_lstm", 2048),
    Cell("minigrid-flat-ppo_lstm", "testkit.matrix_plants:MemoryFlat-v0", "MiniGrid, view flattened",
         "ppo_lstm", 4096, stateful=True),
    Cell("reach-sac-her", "testkit.goal_envs:PointReach", "goal-conditioned (testkit), HER", "sac", 3000,
         {"replay_buffer_class": "HerReplayBuffer", "net_arch": [64, 64], "batch_size": 128}),
    Cell("camera-ppo", "testkit.dict_envs:BoxCameraCartPole", "a camera alone, 36x36x1 (testkit)", "ppo", 4096),
    Cell("valves-ppo", "testkit.matrix_plants:ThreeValves", "MultiDiscrete (testkit)", "ppo", 8192),
    Cell("pump-a2c", "testkit.matrix_plants:ValveAndPump", "MultiDiscrete with start (testkit)", "a2c", 8192),
    Cell("valves-binary-ppo_lstm", "testkit.matrix_plants:ThreeValvesBinary", "MultiBinary (testkit)", "ppo_lstm",
         8192, stateful=True),
)  # fmt: skip


def _cli(*args: str | Path) -> tuple[int, str, str]:
    """`rl2edge ARGS` as a user runs it: (exit status, stdout, the last line of stderr)."""
    from testkit.cli import rl2edge

    proc = rl2edge(*args)
    lines = proc.stderr.strip().splitlines()
    if proc.returncode != 0 and "Traceback" in proc.stderr:
        return proc.returncode, proc.stdout, "TRACEBACK: " + (lines[-1] if lines else "")
    return proc.returncode, proc.stdout, lines[-1] if lines else ""


def run_cell(cell: Cell, episodes: int, work: Path) -> dict[str, Any]:
    from benchmarks.returns import random_returns
    from testkit.plc import served_returns

    t0 = time.perf_counter()
    row: dict[str, Any] = {"cell": cell.name, "env": cell.env, "origin": cell.origin, "algo": cell.algo,
                           "steps": cell.steps}  # fmt: skip
    hp = work / "hp.yml"
    hp.write_text(json.dumps({"eval_freq": 0, "eval_episodes": 2, **cell.hp}))  # JSON is YAML
    rc, _, last = _cli("train", "--algo", cell.algo, "--env", cell.env, "--steps", str(cell.steps),
                       "--config", hp, "--out", work / "run", "--no-progress")  # fmt: skip
    if rc != 0:
        return {**row, "outcome": "traceback" if last.startswith("TRACEBACK") else "refused", "reason": last,
                "stage": "train", "seconds": time.perf_counter() - t0}  # fmt: skip
    rc, _, last = _cli("export", work / "run", "--quantize", "int8", "--calib-episodes", "2", "--eval-episodes",
                       "2", "--out", work / "art", "--no-progress")  # fmt: skip
    if rc != 0:
        return {**row, "outcome": "traceback" if last.startswith("TRACEBACK") else "refused", "reason": last,
                "stage": "export", "seconds": time.perf_counter() - t0}  # fmt: skip
    rc, out, last = _cli("evaluate", work / "art", "--episodes", str(episodes), "--seed", "0", "--json")
    if rc != 0:
        return {**row, "outcome": "traceback" if last.startswith("TRACEBACK") else "refused", "reason": last,
                "stage": "evaluate", "seconds": time.perf_counter() - t0}  # fmt: skip
    evaluated = json.loads(out.strip().splitlines()[-1])["returns"]
    (work / "serve").mkdir()
    served = served_returns(work / "art", cell.env, 1, 0, work / "serve", episode_start=cell.stateful)
    return {
        **row,
        "outcome": "works",
        "return": float(np.mean(evaluated)),
        "random_return": float(np.mean(random_returns(cell.env, episodes))),  # seeds 0.., as evaluate's
        "served_equals_evaluate": served == evaluated[:1],
        "served": served,
        "evaluated": evaluated,
        "seconds": time.perf_counter() - t0,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = ["plant", "from", "algo", "steps", "outcome", "return (int8)", "random", "served = evaluate", "s",
            "reason"]  # fmt: skip
    body = []
    for r in rows:
        works = r["outcome"] == "works"
        body.append([
            f"`{r['env']}`", r["origin"], r["algo"], f"{r['steps']:,}", r["outcome"],
            f"{r['return']:.1f}" if works else "-", f"{r['random_return']:.1f}" if works else "-",
            ("yes" if r["served_equals_evaluate"] else "NO") if works else "-", f"{r['seconds']:.0f}",
            "" if works else f"{r['stage']}: {r['reason']}".replace("|", "/"),
        ])  # fmt: skip
    return markdown_table(head, body)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    works = [r for r in rows if r["outcome"] == "works"]
    fig, ax = plt.subplots(figsize=(7.5, 3.5))
    for i, r in enumerate(works):
        span = max(1e-9, abs(r["random_return"]))
        ax.bar(i, (r["return"] - r["random_return"]) / span, color="tab:blue")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(works)), [r["cell"] for r in works], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("(return - random) / |random|")
    ax.set_title("Short runs, int8 files: return against a random policy on the same seeds")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", help="comma-separated cell names (default: all)")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="env_matrix")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    # the CLI's processes (and plc-sim's) import testkit's plants as a user's own modules
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    chosen = args.cells.split(",") if args.cells else [c.name for c in CELLS]
    unknown = sorted(set(chosen) - {c.name for c in CELLS})
    if unknown:
        raise SystemExit(f"unknown cells {unknown}; choose from {', '.join(c.name for c in CELLS)}")
    rows = []
    for cell in (c for c in CELLS if c.name in chosen):
        with tempfile.TemporaryDirectory(prefix=f"rl2edge-matrix-{cell.name}-") as work:
            row = run_cell(cell, args.episodes, Path(work))
        _logger.info("%s: %s %s", cell.name, row["outcome"], row.get("return", row.get("reason", "")))
        rows.append(row)
    md = table(rows) + (
        f"\n\nEach cell: `rl2edge train` (the budget shown, the preset where there is one), `export --quantize "
        f"int8`, `evaluate --episodes {args.episodes} --seed 0` (the mean return shown), a random policy on the "
        "same seeds, and one episode (seed 0) served by `rl2edge serve` to `plc-sim` over OPC UA in lockstep, "
        "whose return must equal evaluate's first. 'refused': the command's exit status 2 and its one line."
    )
    data = {"episodes": args.episodes, "rows": rows}
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot(rows, out / f"{args.name}.png")
    return data


if __name__ == "__main__":
    main()
