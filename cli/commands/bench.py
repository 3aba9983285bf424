"""`rl2edge bench`: an artifact's latency from the installed runtime, or a benchmark script of the source tree."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    b = sub.add_parser(
        "bench",
        help="run a benchmark (latency, loop_latency, train_throughput, quantization)",
        formatter_class=fmt,
        description="`latency ARTIFACT` measures one artifact with the runtime alone (numpy + an interpreter): it "
        "runs on the device from the wheel and writes latency_artifact.json/.md to --out (default: .). The rest "
        "runs a script of the source tree's benchmarks/ (a checkout with the training stack); results go to "
        "benchmarks/results/ as JSON, markdown and PNG. Options after the ARTIFACT (or after --) go to the script.",
        epilog="examples:\n  rl2edge bench latency artifacts/cp\n  rl2edge bench latency artifacts/cp --calls 1000 --out /tmp\n"
        "  rl2edge bench latency --suite\n"
        "  rl2edge bench loop_latency artifacts/cp --cycles 1000\n"
        "  rl2edge bench loop_latency -- --artifact artifacts/cp --cycles 1000",
    )
    b.add_argument("what", choices=["latency", "loop_latency", "train_throughput", "quantization"])
    b.add_argument("artifact", nargs="?", help="latency: the artifact to measure")
    b.add_argument(
        "--suite", action="store_true", help="latency: MLP 64x64, MLP 256x256, Nature-CNN in every form"
    )
    b.set_defaults(func=run)


def bench_plan(args: argparse.Namespace) -> tuple[str, list[str]]:
    """What `rl2edge bench` runs: ("rl2edge.runtime.bench", argv) for one artifact's latency, which is in the
    installed package and runs on the device from the wheel; else (script of benchmarks/, argv)."""
    if args.what == "latency" and args.artifact and not args.suite:
        return "rl2edge.runtime.bench", [args.artifact, *args.rest]
    if args.what == "latency" and not args.suite:
        raise ConfigError("rl2edge bench latency needs an ARTIFACT or --suite")
    rest = ["--artifact", args.artifact, *args.rest] if args.artifact else list(args.rest)
    return f"benchmarks/{args.what}.py", [*(["--suite"] if args.suite else []), *rest]


def run(args: argparse.Namespace) -> int:
    import runpy

    target, argv = bench_plan(args)
    if target == "rl2edge.runtime.bench":
        from rl2edge.runtime.bench import main as bench_latency

        print(bench_latency(argv)[1])
        return 0
    script = Path(__file__).resolve().parents[2] / target  # the source tree's root
    if not script.is_file():
        raise ConfigError(
            f"`rl2edge bench {args.what}{' --suite' if args.suite else ''}` runs {target} of a source checkout "
            "(it needs the training stack), and this install has none; `rl2edge bench latency ARTIFACT` works anywhere"
        )
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0
