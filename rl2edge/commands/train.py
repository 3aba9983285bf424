"""`rl2edge train`: train a policy with the algorithm table's agent and write a checkpoint."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rl2edge.commands.common import table
from rl2edge.interrupts import check_interrupted

_logger = logging.getLogger("rl2edge")


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    from rl2edge.train.algos import ALGOS, FRAMEWORKS  # the table only: no framework is imported

    t = sub.add_parser(
        "train",
        help="train a policy and write a checkpoint",
        formatter_class=fmt,
        description="Train a policy on a Gymnasium env and write a checkpoint directory (checkpoint.json + "
        "weights, no pickle), progress.csv and TensorBoard events.\nHyperparameters: the algorithm's defaults "
        "(SB3's), then the env's preset (train/presets/<algo>.yml, Zoo style), then --config FILE, then --steps.",
        epilog="examples:\n  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge train --algo sac --framework tf --env Pendulum-v1 --seed 0 --out runs/pd-sac   # preset: 20k steps",
    )
    t.add_argument("--algo", default="ppo", choices=list(ALGOS), help="algorithm (default: ppo)")
    t.add_argument("--framework", default="torch", choices=FRAMEWORKS, help="backend (default: torch)")
    t.add_argument("--env", required=True, help="Gymnasium id (CartPole-v1) or package.module:EnvClass")
    t.add_argument("--steps", type=int, help="total env steps (default: the preset's n_timesteps)")
    t.add_argument(
        "--seed", type=int, default=0, help="seed; the same seed gives the same checkpoint (default: 0)"
    )
    t.add_argument("--config", help="YAML file of hyperparameters (flat, or keyed by env id as in the Zoo)")
    t.add_argument("--out", help="run directory (default: runs/<env>_<algo>_<framework>_s<seed>)")
    t.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto takes the GPU when there is one",
    )
    t.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.fileio import atomic_directory, check_output_dir
    from rl2edge.train.algos import build_config, train
    from rl2edge.train.core.envs import check_env_id

    check_env_id(args.env)
    overrides = {"n_timesteps": args.steps} if args.steps is not None else {}
    cfg = build_config(args.env, args.config, overrides, algo=args.algo)
    run_dir = Path(
        args.out
        or f"runs/{args.env.replace('/', '_').replace(':', '_')}_{args.algo}_{args.framework}_s{args.seed}"
    )
    check_output_dir(run_dir, force=args.force, what="train")
    _logger.info(
        "training %s/%s on %s for %d steps, seed %d -> %s",
        args.algo,
        args.framework,
        args.env,
        cfg.n_timesteps,
        args.seed,
        run_dir,
    )
    # The run is written beside --out and renamed onto it when complete: an interrupted or failed run
    # leaves --out as it was (with --force, the previous run stays until the new one is done).
    with atomic_directory(run_dir) as staging:
        _logger.info(
            "writing the run to %s until it is complete (TensorBoard: --logdir %s)", staging, staging / "tb"
        )
        result = train(
            args.framework,
            args.env,
            cfg,
            args.seed,
            staging,
            device=args.device,
            progress=None if not args.no_progress else False,
        )
        check_interrupted()
    print(
        table(
            ["run", "steps", "wall s", "steps/s", "eval return"],
            [
                [
                    str(run_dir),
                    result.steps,
                    f"{result.wall_time_s:.1f}",
                    f"{result.steps_per_s:.0f}",
                    f"{result.final_eval.mean:.1f} +- {result.final_eval.std:.1f}",
                ]
            ],
        )
    )
    print(f"next: rl2edge export {run_dir} --quantize int8 --out artifacts/{run_dir.name}")
    return 0
