"""`rl2edge train`: train a policy with the algorithm table's agent and write a checkpoint."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl2edge import bounded
from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError
from rl2edge.interrupts import check_interrupted, stop_request

if TYPE_CHECKING:
    from rl2edge.train.core.config import RunConfig
    from rl2edge.train.core.run import TrainResult

_logger = logging.getLogger("rl2edge")


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    from rl2edge.train.algos import (  # tables only: no framework is imported
        ALGOS,
        DEFAULT,
        FRAMEWORKS,
        MATMUL_PRECISIONS,
        compile_help,
        on_policy_names,
        rollout_worker_names,
    )

    t = sub.add_parser(
        "train",
        help="train a policy and write a checkpoint",
        formatter_class=fmt,
        description="Train a policy on a Gymnasium env and write a checkpoint directory (checkpoint.json + "
        "weights, no pickle), progress.csv and TensorBoard events.\nHyperparameters: the algorithm's defaults "
        "(SB3's), then the env's preset (train/presets/<algo>.yml, Zoo style), then --config FILE, then --steps.",
        epilog="examples:\n  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge train --algo sac --framework tf --env Pendulum-v1 --seed 0 --out runs/pd-sac   # preset: 20k steps\n"
        "  rl2edge train --algo ppo --env CartPole-v1 --seeds 0,1,2 --out runs/cp-seeds   # in parallel on Ray\n"
        "  rl2edge train --algo ppo --env MyTwin-v0 --rollout-workers 4 --address head:6379   # rollouts on Ray\n"
        "  rl2edge train --algo ppo_lstm --env MyTwin-v0 --nproc 4 --device cuda   # one learner process per GPU\n"
        "  torchrun --nnodes 2 --nproc-per-node 4 ... $(which rl2edge) train --algo ppo --env MyTwin-v0   # several nodes",
    )
    t.add_argument("--algo", default=DEFAULT, choices=list(ALGOS), help=f"algorithm (default: {DEFAULT})")
    t.add_argument("--framework", default="torch", choices=FRAMEWORKS, help="backend (default: torch)")
    t.add_argument(
        "--env",
        required=True,
        help="Gymnasium id (CartPole-v1), package.module:Env-v0 (an id the module registers on import) or package.module:EnvClass",
    )
    t.add_argument("--steps", type=bounded.STEPS, help="total env steps (default: the preset's n_timesteps)")
    t.add_argument(
        "--seed",
        type=bounded.SEED,
        default=0,
        help="seed, 0 to 2**32-1; the same seed gives the same checkpoint (default: 0)",
    )
    t.add_argument(
        "--seeds",
        type=bounded.seed_list,
        help="comma-separated seeds, trained in parallel on Ray (pip install 'rl2edge[ray]'); each run goes to "
        "<out>/s<seed>, with the mean and spread of their final evaluations in <out>/seeds.md",
    )
    t.add_argument(
        "--rollout-workers",
        type=bounded.WORKERS,
        default=0,
        metavar="N",
        help=f"{'/'.join(rollout_worker_names())} (not the recurrent ones): spread the n_envs environments over N Ray actors, each stepping its share with a copy "
        "of the policy (for slow simulators); the learner broadcasts the weights every update",
    )
    t.add_argument(
        "--nproc",
        type=bounded.PROCESSES,
        default=1,
        metavar="N",
        help=f"{', '.join(n.lower() for n in on_policy_names())} in torch: a data-parallel learner of N processes on torch.distributed "
        "(gloo on CPUs; one per GPU with NCCL, not yet run on a GPU), each stepping its share of the n_envs envs with its share of every "
        "minibatch, gradients averaged; rank 0 writes the run. --steps stays the whole job's (docs/ray.md). "
        "Under torchrun leave it out: torchrun starts the processes",
    )
    t.add_argument(
        "--per-process",
        action="store_true",
        help="with --nproc or torchrun: n_envs, the step budget and batch_size are each process's, so the job "
        "collects N times as much (rsl-rl's and CleanRL's convention)",
    )
    t.add_argument(
        "--address",
        help="with --seeds/--rollout-workers: join the Ray cluster at host:port (`ray start --head` prints it) "
        "or auto; without it Ray starts on this machine",
    )
    t.add_argument("--config", help="YAML file of hyperparameters (flat, or keyed by env id as in the Zoo)")
    t.add_argument("--out", help="run directory (default: runs/<env>_<algo>_<framework>_s<seed>)")
    t.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto takes the GPU when there is one",
    )
    t.add_argument(
        "--threads",
        type=bounded.THREADS,
        default=1,
        metavar="N",
        help="CPU threads per op for torch/TensorFlow (default 1: fastest for 64-wide nets such as PPO's "
        "and DQN's; 2 or more pay for SAC's and TD3's 256-wide layers, see benchmarks/train_throughput.py)",
    )
    t.add_argument(
        "--compile",
        action="store_true",
        help=f"{compile_help()}. Compiling takes seconds at the start of the run. For GPUs: on a CPU none beats the "
        "default path over a short run (docs/benchmarks.md, training throughput)",
    )
    t.add_argument(
        "--matmul-precision",
        default="highest",
        choices=MATMUL_PRECISIONS,
        help="torch's float32 matmul precision in the training phases (torch.set_float32_matmul_precision; "
        "evaluations and exports stay float32): highest (default) is float32; high allows TF32 on a CUDA GPU; "
        "medium bfloat16 products on a CPU with AMX or AVX512-BF16. The run changes with it: docs/benchmarks.md "
        "(training throughput) has the returns measured",
    )
    t.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.fileio import check_output_dir
    from rl2edge.train.algos import (
        build_config,
        check_compile,
        check_data_parallel,
        check_env,
        check_matmul_precision,
        check_rollout_workers,
        per_process,
    )
    from rl2edge.train.core.envs import check_env_id
    from rl2edge.train.core.threads import set_cpu_threads
    from rl2edge.train.data_parallel.job import world_from_env

    seeds = list(args.seeds) if args.seeds else None
    check_env_id(args.env)
    overrides = {"n_timesteps": args.steps} if args.steps is not None else {}
    cfg = build_config(args.env, args.config, overrides, algo=args.algo)
    check_env(args.algo, args.env)
    set_cpu_threads(args.threads)  # checks it before anything starts
    if args.compile:
        check_compile(args.algo, args.framework)
    check_matmul_precision(args.matmul_precision, args.framework)
    if args.rollout_workers:
        check_rollout_workers(cfg, args.rollout_workers)
    if seeds and args.rollout_workers:
        raise ConfigError("--seeds and --rollout-workers do not combine; use one of them")
    if args.address and not (seeds or args.rollout_workers):
        raise ConfigError("--address joins a Ray cluster for --seeds or --rollout-workers; add one of them")
    job = world_from_env()  # (rank, world, local rank) under torchrun or --nproc's own ranks
    world = job[1] if job is not None else args.nproc
    if job is not None and args.nproc not in (1, world):
        raise ConfigError(
            f"--nproc {args.nproc} inside a job of WORLD_SIZE {world}: torchrun started the processes; leave "
            "--nproc out"
        )
    if world > 1:
        if seeds or args.rollout_workers:
            raise ConfigError("--nproc does not combine with --seeds or --rollout-workers; use one of them")
        if args.per_process:
            cfg = per_process(cfg, world)
        check_data_parallel(cfg, args.framework, world)
    elif args.per_process:
        raise ConfigError("--per-process sizes each process of --nproc N (or of a torchrun job); add --nproc")
    tag = f"s{args.seed}" if not seeds else "seeds"
    run_dir = Path(
        args.out or f"runs/{args.env.replace('/', '_').replace(':', '_')}_{args.algo}_{args.framework}_{tag}"
    )
    if job is not None and job[0] != 0:  # rank 0 writes the run; this rank's files go nowhere
        return _run_rank(args, cfg, job)
    check_output_dir(run_dir, force=args.force, what="train")
    if world > 1 and job is None:
        from rl2edge.train.data_parallel.group import check_gpus_for
        from rl2edge.train.data_parallel.launch import run_job

        check_gpus_for(world, args.device)

        _logger.info(
            "starting %d processes of this command (ranks 0-%d); rank 0 writes %s", world, world - 1, run_dir
        )
        return run_job(args.argv, world, run_dir)
    if seeds:
        return _run_seeds(args, cfg, seeds, run_dir)
    if args.rollout_workers:
        from rl2edge.train.distributed.cluster import ray_session

        with ray_session(args.address, num_cpus=args.rollout_workers):
            return _run_one(args, cfg, run_dir)
    return _run_one(args, cfg, run_dir, job)


def _run_one(
    args: argparse.Namespace, cfg: RunConfig, run_dir: Path, job: tuple[int, int, int] | None = None
) -> int:
    from rl2edge.fileio import atomic_directory

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
    with atomic_directory(run_dir, completes=True) as staging:
        _logger.info(
            "writing the run to %s until it is complete (TensorBoard: --logdir %s)", staging, staging / "tb"
        )
        result = _train(args, cfg, staging, job is not None, progress=not args.no_progress)
        check_interrupted()
    world = job[1] if job is not None else 1
    head = ["run", *(["processes"] if world > 1 else []), "steps", "wall s", "steps/s", "eval return"]
    print(
        table(
            head,
            [
                [
                    str(run_dir),
                    *([world] if world > 1 else []),
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


def _train(
    args: argparse.Namespace, cfg: RunConfig, run_dir: Path, data_parallel: bool, progress: bool
) -> TrainResult:
    """The command's options as train.algos.train takes them."""
    from rl2edge.train.algos import train

    return train(
        args.framework,
        args.env,
        cfg,
        args.seed,
        run_dir,
        device=args.device,
        progress=None if progress else False,
        rollout_workers=args.rollout_workers,
        threads=args.threads,
        compile_update=args.compile,
        matmul_precision=args.matmul_precision,
        data_parallel=data_parallel,
    )


def _run_rank(args: argparse.Namespace, cfg: RunConfig, job: tuple[int, int, int]) -> int:
    """A rank other than 0 of a data-parallel job: it trains its share in a folder of its own, removed at
    the end (rank 0 writes the run)."""
    import tempfile

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.WARNING))  # rank 0 reports the job
    with tempfile.TemporaryDirectory(prefix=f"rl2edge-rank{job[0]}-") as scratch:
        _train(args, cfg, Path(scratch), data_parallel=True, progress=False)
    return 0


def _run_seeds(args: argparse.Namespace, cfg: RunConfig, seeds: list[int], out: Path) -> int:
    from rl2edge.train.distributed.cluster import ray_session
    from rl2edge.train.distributed.seeds import summary_rows, train_seeds

    _logger.info(
        "training %s/%s on %s for %d steps, seeds %s -> %s/s<seed>",
        args.algo,
        args.framework,
        args.env,
        cfg.n_timesteps,
        ",".join(map(str, seeds)),
        out,
    )
    import shutil
    import tempfile

    results = None
    # the seeds' working folders on this node: removed here, after the session, whatever became of the tasks
    scratch = Path(tempfile.mkdtemp(prefix="rl2edge-seeds-"))
    try:
        with ray_session(args.address):
            results = train_seeds(
                args.framework,
                args.env,
                cfg,
                seeds,
                out,
                device=args.device,
                threads=args.threads,
                compile_update=args.compile,
                matmul_precision=args.matmul_precision,
                scratch=scratch,
            )
        print(table(["seed", "run", "steps", "wall s", "eval return"], summary_rows(results)))
        finals = [r.eval_mean for r in results]
        print(
            f"across {len(finals)} seeds: mean {sum(finals) / len(finals):.1f}, min {min(finals):.1f}, "
            f"max {max(finals):.1f} ({out / 'seeds.md'})"
        )
    except KeyboardInterrupt as exc:  # while Ray shut down or the table printed: every seed was written
        stop = stop_request(exc)
        if stop.kept is None and results is not None:
            stop.kept = f"every seed had finished: the runs, seeds.json and seeds.md are in {out}"
        raise stop from None  # reported as the stop request, no traceback
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0
