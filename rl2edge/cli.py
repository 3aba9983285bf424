"""The `rl2edge` command. Each subcommand imports its package only when it runs, so that
`rl2edge evaluate` on the edge never loads torch and `rl2edge --help` is instant."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rl2edge.errors import ConfigError, Rl2EdgeError

_logger = logging.getLogger("rl2edge")

QUANT_MODES = ("fp32", "fp16", "dynamic", "int8")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


# ----------------------------------------------------------------------------------------------- train
def _cmd_train(args: argparse.Namespace) -> int:
    from rl2edge.fileio import check_output_dir
    from train.core.config import build_config
    from train.core.envs import check_env_id

    if args.algo != "ppo":
        raise ConfigError(f"--algo {args.algo} is not implemented yet; available: ppo")
    check_env_id(args.env)
    overrides = {"n_timesteps": args.steps} if args.steps is not None else {}
    cfg = build_config(args.env, args.config, overrides)
    run_dir = Path(
        args.out
        or f"runs/{args.env.replace('/', '_').replace(':', '_')}_{args.algo}_{args.framework}_s{args.seed}"
    )
    check_output_dir(run_dir, force=args.force, what="train")
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.framework == "torch":
        from train.torch_backend.ppo import train_ppo
    else:
        raise ConfigError("--framework tf is not implemented yet; use --framework torch")
    _logger.info(
        "training ppo/%s on %s for %d steps, seed %d -> %s",
        args.framework,
        args.env,
        cfg.n_timesteps,
        args.seed,
        run_dir,
    )
    result = train_ppo(
        args.env,
        cfg,
        args.seed,
        run_dir,
        device=args.device,
        progress=None if not args.no_progress else False,
    )
    print(
        _table(
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


# ---------------------------------------------------------------------------------------------- export
def _cmd_export(args: argparse.Namespace) -> int:
    from export.pipeline import ExportOptions, export_checkpoint

    opts = ExportOptions(
        quantize=args.quantize,
        calib_episodes=args.calib_episodes,
        eval_episodes=args.eval_episodes,
        seed=args.seed,
        force=args.force,
        progress=None if not args.no_progress else False,
    )
    report = export_checkpoint(Path(args.run_dir), Path(args.out) if args.out else None, opts)
    print(report.table())
    print(report.footer())
    return 0


# -------------------------------------------------------------------------------------------- evaluate
def _cmd_evaluate(args: argparse.Namespace) -> int:
    from runtime.policy import Policy
    from train.core.envs import check_env_id
    from train.core.evaluation import evaluate

    check_env_id(args.env)
    policy = Policy.load(args.artifact, backend=args.backend)
    result = evaluate(policy.predict, args.env, args.episodes, args.seed)
    out = {
        "artifact": str(args.artifact),
        "env_id": args.env,
        "backend": policy.backend_name,
        "quantization": policy.manifest.quantization["mode"],
        "episodes": args.episodes,
        "seed": args.seed,
        "mean_return": result.mean,
        "std_return": result.std,
        "returns": result.returns,
        "lengths": result.lengths,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            _table(
                ["artifact", "quantization", "backend", "episodes", "mean return"],
                [
                    [
                        args.artifact,
                        out["quantization"],
                        out["backend"],
                        args.episodes,
                        f"{result.mean:.1f} +- {result.std:.1f}",
                    ]
                ],
            )
        )
    return 0


# ------------------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rl2edge",
        description="Train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="quick start:\n"
        "  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge evaluate artifacts/cp --env CartPole-v1 --episodes 20 --seed 0 --json",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    t = sub.add_parser(
        "train",
        help="train a policy and write a checkpoint",
        formatter_class=fmt,
        description="Train a policy on a Gymnasium env and write a checkpoint directory (checkpoint.json + "
        "weights, no pickle), progress.csv and TensorBoard events.\nHyperparameters: PPOConfig defaults, then "
        "the env's preset (train/presets/ppo.yml, Zoo style), then --config FILE, then --steps.",
        epilog="example:\n  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp",
    )
    t.add_argument("--algo", default="ppo", choices=["ppo"], help="algorithm (default: ppo)")
    t.add_argument("--framework", default="torch", choices=["torch", "tf"], help="backend (default: torch)")
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
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser(
        "export",
        help="export a checkpoint to a verified TFLite artifact",
        formatter_class=fmt,
        description="Rebuild the deterministic policy with observation normalization and the action transform "
        "folded in, export ONNX (opset 17), convert to TFLite with onnx2tf, quantize with calibration data from "
        "rollouts of the trained policy, verify every file against the source, and write the artifact "
        "(manifest.json, policy.tflite, policy.onnx). Nothing is written when verification fails.",
        epilog="examples:\n  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge export runs/cp --quantize all --out artifacts/cp   # one artifact per mode in artifacts/cp/<mode>/",
    )
    e.add_argument("run_dir", help="checkpoint directory written by `rl2edge train`")
    e.add_argument(
        "--quantize", default="int8", choices=[*QUANT_MODES, "all"], help="quantization mode (default: int8)"
    )
    e.add_argument("--out", help="artifact directory (default: artifacts/<run name>)")
    e.add_argument(
        "--calib-episodes",
        type=int,
        default=10,
        help="episodes of the trained policy for calibration and parity data",
    )
    e.add_argument("--eval-episodes", type=int, default=10, help="episodes of closed-loop return per file")
    e.add_argument("--seed", type=int, default=0, help="seed of the calibration and evaluation episodes")
    e.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_export)

    v = sub.add_parser(
        "evaluate",
        help="run an artifact in its environment",
        formatter_class=fmt,
        description="Run an artifact through the runtime (the code that serves it on the device) for N episodes "
        "with seeds S, S+1, ... and report the returns.",
        epilog="example:\n  rl2edge evaluate artifacts/cp --env CartPole-v1 --episodes 20 --seed 0 --json",
    )
    v.add_argument("artifact", help="artifact directory (manifest.json + policy.tflite)")
    v.add_argument("--env", required=True, help="Gymnasium id or package.module:EnvClass")
    v.add_argument("--episodes", type=int, default=20, help="episodes (default: 20)")
    v.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0)")
    v.add_argument(
        "--backend", default="auto", help="auto, litert, tflite-runtime, tensorflow or onnxruntime"
    )
    v.add_argument(
        "--json", action="store_true", help="print one JSON object (mean_return, std_return, returns, ...)"
    )
    v.set_defaults(func=_cmd_evaluate)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ start-up noise out
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for noisy in ("tensorflow", "absl", "onnx2tf", "h5py", "matplotlib"):
        logging.getLogger(noisy).setLevel(max(level, logging.ERROR))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except Rl2EdgeError as exc:
        print(f"rl2edge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rl2edge {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
