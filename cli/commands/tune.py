"""`rl2edge tune`: a hyperparameter sweep on Ray Tune (Optuna search, ASHA early stopping)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rl2edge import bounded
from rl2edge.cli.commands.common import table


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    from rl2edge.train.algos import ALGOS, DEFAULT, FRAMEWORKS

    t = sub.add_parser(
        "tune",
        help="sweep hyperparameters on Ray Tune (Optuna + ASHA); every trial is a run directory",
        formatter_class=fmt,
        description="Sample hyperparameters from a YAML search space with Optuna (TPE), train each trial as an "
        "ordinary run, and stop the weak ones early with ASHA on the periodic evaluations. Writes <out>/trials/"
        "<trial>/ (run directories), <out>/sweep.{json,md,png}, and names the best run for `rl2edge export`.\n"
        "Needs the ray extra: pip install 'rl2edge[ray]'.\n\n"
        "Search space file:\n"
        "  fixed:  {n_timesteps: 20000, eval_freq: 2000}\n"
        "  space:\n"
        "    learning_rate: {loguniform: [1.0e-4, 3.0e-3]}\n"
        "    batch_size: {choice: [64, 128, 256]}\n"
        "    tau: {uniform: [0.005, 0.05]}\n"
        "    train_freq: {int: [1, 8]}",
        epilog="examples:\n"
        "  rl2edge tune --algo sac --env Pendulum-v1 --space sweeps/sac_pendulum.yml --trials 16 --out sweeps/pd\n"
        "  rl2edge tune ... --seeds 0,1,2            # each configuration on three seeds (mean is compared)\n"
        "  rl2edge tune ... --address head:6379      # on a running Ray cluster\n"
        "  rl2edge tune ... --out sweeps/pd --resume # continue an interrupted sweep",
    )
    t.add_argument("--algo", default=DEFAULT, choices=list(ALGOS), help=f"algorithm (default: {DEFAULT})")
    t.add_argument("--framework", default="torch", choices=FRAMEWORKS, help="backend (default: torch)")
    t.add_argument(
        "--env",
        required=True,
        help="Gymnasium id (CartPole-v1), package.module:Env-v0 (an id the module registers on import) or package.module:EnvClass",
    )
    t.add_argument("--space", required=True, help="YAML search space (space: and optionally fixed:)")
    t.add_argument(
        "--config", help="YAML hyperparameters applied before the space (as rl2edge train --config)"
    )
    t.add_argument(
        "--trials", type=bounded.TRIALS, default=16, help="number of configurations to try (default: 16)"
    )
    t.add_argument(
        "--seeds",
        type=bounded.seed_list,
        default="0",
        help="comma-separated seeds each configuration trains on (default: 0)",
    )
    t.add_argument(
        "--max-concurrent",
        type=bounded.CONCURRENT,
        help="trials running at once (default: as many as the CPUs allow)",
    )
    t.add_argument(
        "--grace-steps",
        type=bounded.STEPS,
        help="env steps every trial runs before ASHA may stop it (default: one evaluation period)",
    )
    t.add_argument(
        "--reduction-factor",
        type=bounded.REDUCTION_FACTOR,
        default=2,
        help="ASHA's reduction factor (default: 2)",
    )
    t.add_argument(
        "--search-seed",
        type=bounded.SEED,
        default=0,
        help="seed of Optuna's sampler, 0 to 2**32-1 (default: 0)",
    )
    t.add_argument(
        "--max-failures",
        type=bounded.FAILURES,
        default=1,
        help="retries of a trial that crashes or loses its node (default: 1)",
    )
    t.add_argument("--address", help="join the Ray cluster at host:port or auto; without it Ray starts here")
    t.add_argument("--out", help="sweep directory (default: sweeps/<env>_<algo>_<framework>)")
    t.add_argument("--resume", action="store_true", help="continue the interrupted sweep in --out")
    t.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shutil

    from rl2edge.fileio import check_output_dir
    from rl2edge.train.algos import check_env
    from rl2edge.train.core.envs import check_env_id
    from rl2edge.train.distributed.cluster import ray_session, require_ray
    from rl2edge.train.distributed.search_space import load_search_space

    seeds = tuple(args.seeds)
    check_env_id(args.env)
    check_env(args.algo, args.env)
    space = load_search_space(args.space, args.algo, args.env, args.config)
    out = Path(
        args.out or f"sweeps/{args.env.replace('/', '_').replace(':', '_')}_{args.algo}_{args.framework}"
    )
    if not args.resume:
        check_output_dir(out, force=args.force, what="tune")
        if args.force and out.is_dir():
            shutil.rmtree(out)
    require_ray()
    from rl2edge.train.distributed.sweep import SweepSpec, run_sweep

    spec = SweepSpec(
        args.algo,
        args.framework,
        args.env,
        space,
        args.config,
        seeds,
        args.trials,
        args.max_concurrent,
        args.grace_steps,
        args.reduction_factor,
        args.search_seed,
        args.max_failures,
    )
    with ray_session(args.address):
        report = run_sweep(spec, out, resume=args.resume, progress=None if not args.no_progress else False)
    st = report["status"]
    print(
        table(
            ["trials", "complete", "stopped early", "failed", "wall s", "env steps run", "ASHA saved"],
            [
                [
                    report["trials"],
                    st["complete"],
                    st["stopped early"],
                    st["error"],
                    f"{report['wall_time_s']:.0f}",
                    report["env_steps_run"],
                    f"{100 * report['asha_saved_fraction']:.0f}%",
                ]
            ],
        )
    )
    best = report["best"]
    print(
        f"best: trial {best['trial_id']}, final eval {best['final_eval']:.1f}: {best['run_dir']} ({out / 'sweep.md'})"
    )
    print(f"next: rl2edge export {best['run_dir']} --quantize int8 --out artifacts/{out.name}-best")
    return 0
