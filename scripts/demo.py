"""The demo of the main job: train PPO on CartPole-v1, export every quantization mode, evaluate each,
then serve the int8 artifact to a simulated PLC over OPC UA.

Runs the same `rl2edge` commands a user would type, prints each one, and ends with a table.
Usage: python scripts/demo.py [--steps N] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
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


def closed_loop(exe: str, artifact: Path, env_id: str, seed: int, out: Path, episodes: int = 3) -> None:
    """plc-sim plays the PLC (a real OPC UA server on loopback); serve closes the loop over OPC UA."""
    from rl2edge.ports import free_port

    url = f"opc.tcp://127.0.0.1:{free_port()}"
    record, summary = out / "plc-returns.json", out / "serve-summary.json"
    sim_cmd = [
        exe,
        "plc-sim",
        "--env",
        env_id,
        "--endpoint",
        url,
        "--mode",
        "lockstep",
        "--seed",
        str(seed),
        "--episodes",
        str(episodes),
        "--record",
        str(record),
    ]
    serve_cmd = [
        exe,
        "serve",
        str(artifact),
        "--endpoint",
        url,
        "--period-ms",
        "20",
        "--deadline-ms",
        "50",
        "--summary",
        str(summary),
    ]
    print(f"\n$ {shlex.join(sim_cmd)} &\n$ {shlex.join(serve_cmd)} &", flush=True)
    t0 = time.perf_counter()
    with open(out / "plc-sim.log", "wb") as sim_log, open(out / "serve.log", "wb") as serve_log:
        sim = subprocess.Popen(sim_cmd, stdout=sim_log, stderr=subprocess.STDOUT)
        time.sleep(2.0)  # let the server bind before serve's first connect (serve would retry anyway)
        serve = subprocess.Popen(serve_cmd, stdout=serve_log, stderr=subprocess.STDOUT)
        try:
            if sim.wait(timeout=600) != 0:
                sys.exit(f"demo: plc-sim failed, see {out / 'plc-sim.log'}")
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=30)
            if sim.poll() is None:
                sim.kill()
    returns = json.loads(record.read_text())["returns"]
    s = json.loads(summary.read_text())
    lat = s["latency_ms"]
    print(f"  ({time.perf_counter() - t0:.1f} s; logs in {out}/plc-sim.log and {out}/serve.log)")
    print(
        f"\nClosed loop over OPC UA (lockstep, int8 artifact, 20 ms period): returns "
        f"{' '.join(f'{r:.0f}' for r in returns)}\n"
    )
    print("| cycles | p50 ms | p99 ms | p99.9 ms | max ms | budget ms | deadline misses | invalid | stale |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {s['cycles']} | {lat['p50']:.2f} | {lat['p99']:.2f} | {lat['p99.9']:.2f} | {lat['max']:.2f} | 50 | "
        f"{s['deadline_misses']} | {s['invalid']} | {s['stale']} |"
    )


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
    closed_loop(exe, art_dir / "int8", args.env, args.seed, out)
    print(f"demo finished in {time.perf_counter() - start:.0f} s (install not included)")


if __name__ == "__main__":
    main()
