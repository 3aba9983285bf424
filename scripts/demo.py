"""The demo of the main job: train PPO on CartPole-v1, export every quantization mode, evaluate each.

Runs the same `rl2edge` commands a user would type, prints each one, and ends with a table.
Usage: python scripts/demo.py [--steps N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

MODES = ("fp32", "fp16", "dynamic", "int8")


def run(cmd: list[str], capture: bool = False) -> str:
    print(f"\n$ {shlex.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, text=True, stdout=subprocess.PIPE if capture else None)
    if proc.returncode != 0:
        sys.exit(f"demo: command failed with exit code {proc.returncode}: {shlex.join(cmd)}")
    print(f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    return proc.stdout or ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="demo-out")
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("rl2edge"))
    out = Path(args.out)
    run_dir, art_dir = out / "run", out / "artifacts"
    start = time.perf_counter()

    run(
        [
            exe,
            "train",
            "--algo",
            "ppo",
            "--framework",
            "torch",
            "--env",
            args.env,
            "--steps",
            str(args.steps),
            "--seed",
            str(args.seed),
            "--out",
            str(run_dir),
            "--force",
        ]
    )
    run([exe, "export", str(run_dir), "--quantize", "all", "--out", str(art_dir), "--force"])
    rows = []
    for mode in MODES:
        text = run(
            [
                exe,
                "evaluate",
                str(art_dir / mode),
                "--env",
                args.env,
                "--episodes",
                "20",
                "--seed",
                str(args.seed),
                "--json",
            ],
            capture=True,
        )
        res = json.loads(text.strip().splitlines()[-1])
        size = (art_dir / mode / "policy.tflite").stat().st_size
        rows.append(
            (
                mode,
                f"{size / 1024:.1f}",
                f"{res['mean_return']:.1f} +- {res['std_return']:.1f}",
                res["backend"],
            )
        )

    print(
        "\nClosed-loop evaluation of each artifact through the runtime (20 episodes, seeds "
        f"{args.seed}..{args.seed + 19}):\n"
    )
    print("| mode | policy.tflite KB | mean return | interpreter |\n|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\nexport report: {art_dir / 'report.md'}")
    print(f"demo finished in {time.perf_counter() - start:.0f} s (install not included)")


if __name__ == "__main__":
    main()
