"""Returns against the RL Baselines3 Zoo: train each algorithm on its preset for the Zoo's step count,
over several seeds and both backends, export each run to int8 (which measures the fp32 and int8 files'
deterministic closed-loop returns through the runtime), and write a table next to the Zoo's published
numbers.

    python benchmarks/returns.py --suite must-show            # SAC/TD3 Pendulum 20k, DQN CartPole 50k
    python benchmarks/returns.py --suite zoo --seeds 0        # + Acrobot DQN, LunarLander(Continuous)
    python benchmarks/returns.py --cells sac:Pendulum-v1 --frameworks torch --seeds 0,1,2
    python benchmarks/returns.py --suite a2c-rainbow --name returns_a2c_rainbow   # A2C, Rainbow: 3 seeds
    python benchmarks/returns.py --suite agv --name returns_agv   # the AGV example (Dict), + its references
    python benchmarks/returns.py --suite camera --name returns_camera   # a camera key (Nature-CNN), PPO
    python benchmarks/returns.py --suite memory --frameworks torch --name returns_memory   # ppo_lstm vs ppo

Each training and each export runs in its own process (`rl2edge train`, `rl2edge export`), one at a time.
Finished runs and artifacts under --runs-dir are reused, so an interrupted benchmark resumes where it
stopped. Writes benchmarks/results/returns.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results  # noqa: E402

# (algo, env) -> (steps, the Zoo's published return or None); benchmarks/reference.md (from the Zoo's
# benchmark.md). The Zoo has no Rainbow: its step budgets are issue #15's targets.
ZOO: dict[tuple[str, str], tuple[int, float | None]] = {
    ("a2c", "CartPole-v1"): (500_000, 500.0),
    ("a2c", "Acrobot-v1"): (500_000, -83.4),
    ("rainbow", "CartPole-v1"): (100_000, None),
    ("rainbow", "Acrobot-v1"): (100_000, None),
    ("rainbow", "LunarLander-v3"): (500_000, None),
    ("sac", "Pendulum-v1"): (20_000, -157.0),
    ("td3", "Pendulum-v1"): (20_000, -152.0),
    ("dqn", "CartPole-v1"): (50_000, 500.0),
    ("dqn", "Acrobot-v1"): (100_000, -76.6),
    ("sac", "LunarLanderContinuous-v3"): (500_000, 260.0),
    ("ppo", "LunarLander-v3"): (1_000_000, 242.0),
    ("sac", "MountainCarContinuous-v0"): (50_000, 94.7),
    ("ppo", "examples.agv:AgvDictEnv"): (1_000_000, None),
    ("sac", "examples.agv:AgvDictEnv"): (60_000, None),
    ("ppo", "testkit.dict_envs:CameraCartPole"): (60_000, None),
    # partial observability: the Zoo's ppo_lstm benchmark (RecurrentPPO) figures; plain PPO, the same budget
    ("ppo_lstm", "CartPoleNoVel-v1"): (100_000, 500.0),
    ("ppo", "CartPoleNoVel-v1"): (100_000, None),
    ("ppo_lstm", "PendulumNoVel-v1"): (100_000, -217.9),  # the Zoo's benchmark (with gSDE): -217.9 +- 140.1
    ("a2c_lstm", "CartPoleNoVel-v1"): (100_000, None),  # sb3-contrib and the Zoo have no recurrent A2C
}
AGV = "examples.agv:AgvDictEnv"
CAMERA = "testkit.dict_envs:CameraCartPole"
# Cells trained on a config file of their own instead of a preset (the example's hyperparameters).
CONFIGS = {
    ("ppo", AGV): "examples/agv/ppo.yml",
    ("sac", AGV): "examples/agv/sac.yml",
    ("ppo", CAMERA): "benchmarks/configs/ppo_camera_cartpole.yml",
    ("ppo", "CartPoleNoVel-v1"): "benchmarks/configs/ppo_cartpole_novel.yml",
    ("ppo", "CartPoleNoVel-v1", "stack4"): "benchmarks/configs/ppo_cartpole_novel_stack4.yml",
    ("ppo_lstm", "CartPoleNoVel-v1", "gru"): "benchmarks/configs/ppo_lstm_cartpole_novel_gru.yml",
}
SUITES = {
    "must-show": [("sac", "Pendulum-v1"), ("td3", "Pendulum-v1"), ("dqn", "CartPole-v1")],
    "zoo": [c for c in ZOO if c[0] not in ("a2c", "rainbow") and "NoVel" not in c[1]],
    # A2C and Rainbow (issue #15); LunarLander's 500k Rainbow steps run as their own cell, one seed
    "agv": [("ppo", AGV), ("sac", AGV)],
    "camera": [("ppo", CAMERA)],  # a camera key through rl2edge's own Nature-CNN
    # a task that needs memory: an LSTM policy (its state carried by the artifact) next to plain PPO
    "memory": [
        ("ppo_lstm", "CartPoleNoVel-v1"),
        ("ppo_lstm", "CartPoleNoVel-v1", "gru"),
        ("a2c_lstm", "CartPoleNoVel-v1"),
        ("ppo", "CartPoleNoVel-v1"),
        ("ppo", "CartPoleNoVel-v1", "stack4"),
    ],
    "memory-pendulum": [("ppo_lstm", "PendulumNoVel-v1")],  # a Box action, next to the Zoo's figure
    "a2c-rainbow": [
        ("a2c", "CartPole-v1"),
        ("a2c", "Acrobot-v1"),
        ("rainbow", "CartPole-v1"),
        ("rainbow", "Acrobot-v1"),
    ],
}


def _run(cmd: list[str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}); log {log}:\n{tail}")
    return time.perf_counter() - start


def run_cell(
    algo: str,
    env_id: str,
    framework: str,
    seed: int,
    steps: int,
    runs: Path,
    episodes: int,
    variant: str = "",
) -> dict[str, Any]:
    """`variant`: a cell's own config file beside the algorithm's (CONFIGS[(algo, env, variant)])."""
    name = f"{env_id}_{algo}{'_' + variant if variant else ''}_{framework}_s{seed}_{steps}"
    run_dir, art = runs / name, runs / f"{name}.int8"
    rl2edge = [sys.executable, "-m", "rl2edge.cli"]
    key = (algo, env_id, variant) if variant else (algo, env_id)
    config = ["--config", CONFIGS[key]] if key in CONFIGS else []
    if not (run_dir / "checkpoint.json").is_file():
        _run(
            [*rl2edge, "train", "--algo", algo, "--framework", framework, "--env", env_id, *config, "--steps",
             str(steps), "--seed", str(seed), "--out", str(run_dir), "--device", "cpu", "--no-progress",
             "--force"],
            runs / f"{name}.train.log",
        )  # fmt: skip
    if not (art / "manifest.json").is_file():
        _run(
            [*rl2edge, "export", str(run_dir), "--quantize", "int8", "--out", str(art), "--eval-episodes",
             str(episodes), "--no-progress", "--force"],
            runs / f"{name}.export.log",
        )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    closed = json.loads((art / "manifest.json").read_text())["verification"]["closed_loop"]
    return {
        "algo": algo + (f" ({variant})" if variant else ""),
        "env_id": env_id,
        "framework": framework,
        "seed": seed,
        "steps": summary["steps"],
        "train_wall_s": summary["wall_time_s"],
        "steps_per_s": summary["steps_per_s"],
        "checkpoint": summary["checkpoint"],
        "source_return": closed["source"]["mean_return"],
        "fp32_return": closed["fp32"]["mean_return"],
        "int8_return": closed["this_file"]["mean_return"],
        "episodes": episodes,
    }


def summarize(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["algo"], c["env_id"], c["framework"]), []).append(c)
    rows = []
    for (algo, env_id, fw), cs in groups.items():
        fp32 = np.array([c["fp32_return"] for c in cs])
        int8 = np.array([c["int8_return"] for c in cs])
        zoo_steps, zoo_return = ZOO.get((algo, env_id), (None, None))
        drop = (fp32.mean() - int8.mean()) / max(abs(fp32.mean()), 1e-9) * 100
        rows.append(
            {
                "algo": algo,
                "env_id": env_id,
                "framework": fw,
                "seeds": [c["seed"] for c in cs],
                "steps": cs[0]["steps"],
                "source_mean": float(np.mean([c["source_return"] for c in cs])),
                "fp32_mean": float(fp32.mean()),
                "fp32_per_seed": fp32.tolist(),
                "int8_mean": float(int8.mean()),
                "int8_per_seed": int8.tolist(),
                "int8_drop_pct_of_magnitude": float(drop),
                "zoo_steps": zoo_steps,
                "zoo_return": zoo_return,
                "train_steps_per_s": float(np.mean([c["steps_per_s"] for c in cs])),
            }
        )
    return rows


def table(rows: list[dict[str, Any]], episodes: int) -> str:
    headers = ["algo", "env", "framework", "steps", "seeds", f"fp32 return ({episodes} ep/seed)", "per seed",
               "int8 return", "int8 drop", "Zoo (steps)", "train steps/s"]  # fmt: skip
    body = [
        [
            r["algo"].upper(),
            r["env_id"],
            r["framework"],
            r["steps"],
            len(r["seeds"]),
            f"{r['fp32_mean']:.1f}",
            " / ".join(f"{v:.0f}" for v in r["fp32_per_seed"]),
            f"{r['int8_mean']:.1f}",
            f"{r['int8_drop_pct_of_magnitude']:+.1f}%",
            "-" if r["zoo_return"] is None else f"{r['zoo_return']:g} ({r['zoo_steps'] // 1000}k)",
            f"{r['train_steps_per_s']:.0f}",
        ]
        for r in rows
    ]
    return markdown_table(headers, body)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None or not rows:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    x = np.arange(len(rows))
    ax.bar(x - 0.27, [r["fp32_mean"] for r in rows], 0.27, label="fp32 TFLite")
    ax.bar(x, [r["int8_mean"] for r in rows], 0.27, label="int8 TFLite")
    ax.bar(x + 0.27, [r["zoo_return"] or 0 for r in rows], 0.27, label="Zoo published")
    ax.set_xticks(x, [f"{r['algo']}/{r['framework']}\n{r['env_id']}" for r in rows], fontsize=8)
    ax.set_ylabel("mean deterministic return")
    ax.axhline(0, color="black", lw=0.5)
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=sorted(SUITES), default="must-show")
    p.add_argument("--cells", help="comma-separated algo:env pairs instead of a suite")
    p.add_argument("--frameworks", default="torch,tf")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, help="override every cell's step count (smoke runs)")
    p.add_argument("--episodes", type=int, default=10, help="evaluation episodes per file and seed")
    p.add_argument("--runs-dir", default=str(ROOT / "runs" / "returns"))
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="returns")
    args = p.parse_args(argv)
    cells: list[tuple[str, ...]] = (
        [tuple(c.split(":", 1)) for c in args.cells.split(",")] if args.cells else list(SUITES[args.suite])
    )
    runs = Path(args.runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    results = []
    for algo, env_id, *variant in cells:  # (algo, env) or (algo, env, variant)
        steps = args.steps or ZOO[(algo, env_id)][0]
        for fw in args.frameworks.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                r = run_cell(algo, env_id, fw, seed, steps, runs, args.episodes, *variant)
                print(f"{algo}/{fw} {env_id} seed {seed}: fp32 {r['fp32_return']:.1f} int8 {r['int8_return']:.1f}",
                      flush=True)  # fmt: skip
                results.append(r)
    rows = summarize(results)
    md = table(rows, args.episodes)
    data: dict[str, Any] = {"rows": rows, "runs": results}
    if any(c[1] == AGV for c in cells):
        data["agv_references"] = agv_references(args.episodes)
        md += "\n\n" + references_table("AGV", data["agv_references"], args.episodes)
    if any(c[1] == CAMERA for c in cells):
        data["camera_references"] = {"random (uniform actions)": random_returns(CAMERA, args.episodes)}
        md += "\n\n" + references_table("CameraCartPole", data["camera_references"], args.episodes)
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot(rows, out / f"{args.name}.png")
    print(md)
    return data


def agv_references(episodes: int) -> dict[str, list[float]]:
    """The AGV example's hand-written references on the seeds the exported files are evaluated on."""
    from examples.agv.reference import random_policy, reference_policy, run_episodes, standstill

    return {
        "reference (potential field)": run_episodes(reference_policy, episodes),
        "random (uniform actions, seed 0)": run_episodes(random_policy(0), episodes),
        "standstill": run_episodes(standstill, episodes),
    }


def random_returns(env_id: str, episodes: int) -> list[float]:
    """Uniform random actions (the action space seeded with the episode's seed), on the seeds the exported
    files are evaluated on."""
    from rl2edge.train.core.envs import make_env

    returns = []
    for seed in range(episodes):
        env = make_env(env_id)
        env.action_space.seed(seed)
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + float(reward), terminated or truncated
        env.close()
        returns.append(total)
    return returns


def references_table(name: str, refs: dict[str, list[float]], episodes: int) -> str:
    return "{} references on the same seeds (0 to {}):\n\n{}".format(
        name,
        episodes - 1,
        markdown_table(
            ["policy", f"mean return ({episodes} ep)", "std"],
            [[name, f"{np.mean(r):.2f}", f"{np.std(r):.2f}"] for name, r in refs.items()],
        ),
    )


if __name__ == "__main__":
    main()
