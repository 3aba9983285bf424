"""What only a GPU can show about training, in one run of under 10 minutes on one GPU (scripts/gpu_check.sh
starts it): PPO, SAC and ppo_lstm on the GPU next to the CPU on the same seed (return and steps/s),
`--compile`, TF32 (`--matmul-precision high`), TensorFlow's SAC as one XLA computation on the GPU, and
`--nproc 2` (NCCL) when there are two GPUs. Every run is the `rl2edge train` command a user types.

    scripts/gpu_check.sh                 # on a machine with a GPU: writes benchmarks/results/gpu_check.{json,md,png}
    scripts/gpu_check.sh --device cpu    # dry mode: the same commands on tiny budgets, on the CPU (a test runs it)

A case that cannot run on this machine (TensorFlow without its CUDA wheels sees no GPU; one GPU for --nproc
2) is reported as skipped with the reason, not failed. A case that fails otherwise fails the script.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results

_logger = logging.getLogger("benchmarks.gpu_check")
EXE = str(Path(sys.executable).with_name("rl2edge"))


@dataclass(frozen=True)
class Case:
    name: str
    algo: str
    env: str
    steps: int  # on a GPU; the dry mode takes `dry_steps`
    dry_steps: int
    args: tuple[str, ...] = ()
    framework: str = "torch"
    on_device: bool = True  # False: the CPU reference of the case before it
    gpus: int = 1


def cases() -> list[Case]:
    """Pairs of (CPU, device) on the same seed, then the device-only switches."""
    out: list[Case] = []
    for algo, env, steps, dry in (
        ("ppo", "CartPole-v1", 50_000, 512),
        ("sac", "Pendulum-v1", 5_000, 300),
        ("ppo_lstm", "CartPole-v1", 20_000, 512),
    ):
        out.append(Case(f"{algo} cpu", algo, env, steps, dry, on_device=False))
        out.append(Case(f"{algo} device", algo, env, steps, dry))
    out += [
        Case("ppo --compile", "ppo", "CartPole-v1", 50_000, 512, ("--compile",)),
        Case(
            "ppo TF32 (--matmul-precision high)",
            "ppo",
            "CartPole-v1",
            50_000,
            512,
            ("--matmul-precision", "high"),
        ),
        Case("sac tf --compile (XLA)", "sac", "Pendulum-v1", 5_000, 300, ("--compile",), framework="tf"),
        Case("ppo --nproc 2", "ppo", "CartPole-v1", 50_000, 512, ("--nproc", "2"), gpus=2),
    ]
    return out


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def skip_reason(case: Case, device: str, gpus: int) -> str | None:
    if device == "cpu" and not case.on_device:
        return "dry mode: the device row runs this command"
    if device == "cuda" and case.on_device and case.gpus > gpus:
        return f"needs {case.gpus} GPUs, this machine has {gpus}"
    return None


def run_case(case: Case, device: str, seed: int, work: Path) -> dict[str, Any]:
    dev = device if case.on_device else "cpu"
    steps = case.steps if device == "cuda" else case.dry_steps
    out = work / case.name.replace(" ", "_").replace("(", "").replace(")", "")
    cmd = [EXE, "train", "--algo", case.algo, "--framework", case.framework, "--env", case.env, "--steps",
           str(steps), "--seed", str(seed), "--device", dev, "--out", str(out), "--no-progress", *case.args]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    row: dict[str, Any] = {"case": case.name, "device": dev, "steps": steps, "command": " ".join(cmd[1:])}
    row["command_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        if case.framework == "tf" and "TensorFlow sees no GPU" in last:
            row["skipped"] = f"{last} (the tensorflow wheel needs tensorflow[and-cuda] for a GPU)"
            return row
        raise RuntimeError(f"{case.name} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    row.update(
        steps_per_s=summary["steps_per_s"],
        final_return=summary["final_eval"]["mean_return"],
        device_used=summary["device"],
        world_size=summary.get("world_size", 1),
    )
    _logger.info(
        "%s: %.0f steps/s, return %.1f (%s)", case.name, row["steps_per_s"], row["final_return"], dev
    )
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    done = [r for r in rows if "steps_per_s" in r]
    if plt is None or not done:
        return
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ax.barh([r["case"] for r in done], [r["steps_per_s"] for r in done], color="tab:blue")
    ax.set_xlabel("env steps/s")
    ax.invert_yaxis()
    ax.set_title("Training on the GPU next to the CPU")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the dry mode (tiny budgets)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default=None, help="default: gpu_check (cuda), gpu_check_dry (cpu)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    gpus = gpu_count()
    if args.device == "cuda" and gpus == 0:
        raise SystemExit(
            "gpu_check: torch sees no CUDA device; run it on a GPU machine, or --device cpu (dry mode)"
        )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases():
            reason = skip_reason(case, args.device, gpus)
            if reason is not None:
                rows.append({"case": case.name, "skipped": reason})
                continue
            rows.append(run_case(case, args.device, args.seed, Path(tmp)))
    body = [
        [r["case"], r.get("device", "-"), r.get("steps", "-"),
         f"{r['steps_per_s']:.0f}" if "steps_per_s" in r else "-",
         f"{r['final_return']:.1f}" if "final_return" in r else "-",
         f"{r['command_s']:.1f}" if "command_s" in r else "-", r.get("skipped", "")]
        for r in rows
    ]  # fmt: skip
    mode = (
        "dry mode on the CPU (the commands checked, not the figures)"
        if args.device == "cpu"
        else f"{gpus} GPU(s)"
    )
    md = (
        f"`scripts/gpu_check.sh`, {mode}, seed {args.seed}, one run. Each row is one `rl2edge train` command; "
        "a pair's CPU row is the reference of its device row (same seed, same budget).\n\n"
        + markdown_table(["case", "device", "steps", "steps/s", "return", "command s", "skipped"], body)
    )
    name = args.name or ("gpu_check" if args.device == "cuda" else "gpu_check_dry")
    data = {"device": args.device, "gpus": gpus, "seed": args.seed, "rows": rows}
    out = Path(args.out)
    write_results(name, data, md, out)
    plot(rows, out / f"{name}.png")
    return data


if __name__ == "__main__":
    main()
