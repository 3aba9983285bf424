"""`rl2edge export`: a checkpoint or an SB3 model to verified TFLite artifacts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rl2edge import bounded
from rl2edge.cli.commands.common import QUANT_MODES


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    e = sub.add_parser(
        "export",
        help="export a checkpoint to a verified TFLite artifact",
        formatter_class=fmt,
        description="Rebuild the deterministic policy with observation normalization and the action transform "
        "folded in, export ONNX (opset 17), convert to TFLite with onnx2tf, quantize with calibration data from "
        "rollouts of the trained policy, verify every file against the source, and write the artifact "
        "(manifest.json, policy.tflite, policy.onnx). Nothing is written when verification fails.\n"
        "Stable-Baselines3 models (PPO, A2C, SAC, TD3, DQN; MlpPolicy) export the same way, with VecNormalize's "
        "statistics folded in and the exported actions checked against SB3's own predict(). Loading an SB3 .zip "
        "or VecNormalize .pkl runs pickle: only load files you trust.",
        epilog="examples:\n  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge export runs/cp --quantize all --out artifacts/cp   # one artifact per mode in artifacts/cp/<mode>/\n"
        "  rl2edge export ppo_pendulum.zip --env Pendulum-v1 --vecnormalize vecnormalize.pkl --quantize auto --out artifacts/pd\n"
        "  rl2edge export runs/pd-td3 --quantize int8 --noise ou:theta=0.15,sigma=0.2 --out artifacts/pd-explore\n"
        "  rl2edge export runs/pd-td3 --quantize int8 --max-action-rate 4 --period-ms 50 --out artifacts/pd-smooth\n"
        "  rl2edge export policy.onnx --spec policy.yaml --quantize int8 --out artifacts/robot   # trained elsewhere\n"
        "  rl2edge export policy.onnx --spec policy.yaml --observations plant_log.csv --out artifacts/plant",
    )
    e.add_argument(
        "run_dir",
        metavar="SOURCE",
        help="a checkpoint directory written by `rl2edge train`, a Stable-Baselines3 model.zip, or an ONNX file "
        "trained elsewhere (with --spec)",
    )
    e.add_argument(
        "--quantize",
        default="int8",
        choices=[*QUANT_MODES, "all", "auto"],
        help="quantization mode (default: int8); all: one artifact per mode; auto: the fastest mode whose "
        "closed-loop return stays within --max-return-drop of fp32's",
    )
    e.add_argument(
        "--max-return-drop",
        type=bounded.PERCENT,
        default=1.0,
        metavar="PCT",
        help="--quantize auto: allowed drop of the mean return below fp32's on the same seeds, in %% of the "
        "return's scale, the larger of |fp32's mean| and its spread over the episodes (default: 1)",
    )
    e.add_argument(
        "--env",
        help="Stable-Baselines3 models and files trained elsewhere: the Gymnasium env id the policy acts in "
        "(for files trained elsewhere it may come from the spec, or be left out with --observations)",
    )
    e.add_argument(
        "--spec",
        metavar="SPEC.yaml",
        help="files trained elsewhere (.onnx): what the file cannot say, its observation, normalization and "
        "output (docs/export.md, 'Policies trained elsewhere')",
    )
    e.add_argument(
        "--observations",
        metavar="FILE",
        help="recorded plant observations (.npz or .csv, one row per observation) for calibration and the "
        "parity check, where there is no simulator; without --env no closed-loop check runs",
    )
    e.add_argument("--vecnormalize", help="Stable-Baselines3 models only: the VecNormalize statistics (.pkl)")
    e.add_argument(
        "--allow-constant-output",
        action="store_true",
        help="export a policy whose outputs are the same on every held-out observation (refused by default: "
        "it ignores the plant); non-finite outputs are always refused",
    )
    e.add_argument("--out", help="artifact directory (default: artifacts/<run name>)")
    e.add_argument(
        "--calib-episodes",
        type=bounded.EPISODES,
        default=10,
        help="episodes of the trained policy for calibration and parity data",
    )
    e.add_argument(
        "--eval-episodes", type=bounded.EPISODES, default=10, help="episodes of closed-loop return per file"
    )
    e.add_argument(
        "--seed", type=bounded.SEED, default=0, help="seed of the calibration and evaluation episodes"
    )
    e.add_argument(
        "--noise",
        help="fold exploration noise into the graph (Box actions): gaussian:sigma=0.1 | "
        "ou:theta=0.15,sigma=0.2[,dt=0.01] | policy (SAC's or PPO's own distribution)",
    )
    e.add_argument(
        "--noise-seed",
        type=bounded.NOISE_SEED,
        default=0,
        help="seed of the runtime's noise draws, recorded in the manifest",
    )
    e.add_argument(
        "--max-action-rate",
        metavar="RATE[,RATE...]",
        help="limit how fast a Box action moves, in action units per second (one rate, or one per component); "
        "the graph keeps the previous action as its state. Needs --period-ms",
    )
    e.add_argument(
        "--period-ms",
        type=bounded.PERIOD_MS,
        help="the control period --max-action-rate is stated at: the plant's step period (serve's --period-ms)",
    )
    e.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.export.pipeline import ExportOptions, default_out, export_path
    from rl2edge.export.sources import SourceOptions

    opts = ExportOptions(
        quantize=args.quantize,
        calib_episodes=args.calib_episodes,
        eval_episodes=args.eval_episodes,
        seed=args.seed,
        force=args.force,
        progress=None if not args.no_progress else False,
        max_return_drop_pct=args.max_return_drop,
        noise=args.noise,
        noise_seed=args.noise_seed,
        max_action_rate=args.max_action_rate,
        period_ms=args.period_ms,
        observations=Path(args.observations) if args.observations else None,
        allow_constant_output=args.allow_constant_output,
    )
    src = Path(args.run_dir)
    out = Path(args.out) if args.out else default_out(src)
    source_options = SourceOptions(
        args.env,
        Path(args.vecnormalize) if args.vecnormalize else None,
        Path(args.spec) if args.spec else None,
    )
    report = export_path(src, out, opts, source_options)
    print(report.table())
    if report.auto is not None:
        print(report.auto_table())
    print(report.footer())
    return 0
