"""Loop latency: the serve control loop against plc-sim on loopback, without security and with
Basic256Sha256 SignAndEncrypt, next to the bare asyncua Read+Write round trip of the same nodes, all in
one run. plc-sim runs in its own process (realtime mode), as a PLC would.

    python benchmarks/loop_latency.py --artifact demo-out/artifacts/int8 [--cycles 1000] [--period-ms 20]

Writes benchmarks/results/loop_latency.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from plc_bridge.client import BridgeConfig, PlcClient
from plc_bridge.latency import LatencyHistogram
from plc_bridge.loop import ControlLoop, LoopConfig
from plc_bridge.security import SecurityConfig, make_certificate
from plc_bridge.sim import free_port
from runtime import Policy

# ../shared/REFERENCE.md: asyncua 2.1, one batched Read + one batched Write, two processes on loopback.
REFERENCE_MS = {
    "none": {"p50": 0.83, "p99": 1.21, "max": 4.7},
    "sign_and_encrypt": {"p50": 1.13, "p99": 2.41, "max": 5.7},
}


@contextlib.contextmanager
def plc_sim(env_id: str, url: str, sec_args: list[str], log: Path):
    exe = str(Path(sys.executable).with_name("rl2edge"))
    proc = subprocess.Popen(
        [
            exe,
            "plc-sim",
            "--env",
            env_id,
            "--endpoint",
            url,
            "--mode",
            "realtime",
            "--period-ms",
            "20",
            *sec_args,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) == 0:
                    break
            time.sleep(0.2)
        time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def bare_round_trips(bridge: BridgeConfig, n: int, action: list[float]) -> np.ndarray:
    """The floor: one batched Read + one batched Write, back to back, nothing else."""
    times = np.empty(n)
    async with PlcClient(bridge) as plc:
        for _ in range(20):
            await plc.read()
        for i in range(n):
            t0 = time.perf_counter()
            _, seq = await plc.read()
            await plc.write(action, int(seq), i, 0)
            times[i] = (time.perf_counter() - t0) * 1e3
    return times


async def serve_loop(
    policy: Policy, bridge: BridgeConfig, cycles: int, period_ms: float
) -> tuple[dict[str, Any], LatencyHistogram]:
    """The real control loop for `cycles` cycles: its summary and its latency histogram."""
    loop = ControlLoop(
        policy, bridge, LoopConfig(period_ms=period_ms, max_cycles=cycles, stats_interval_s=3600)
    )
    return await loop.run(asyncio.Event()), loop.latency


def _stats(ms: np.ndarray) -> dict[str, float]:
    return {
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "p99.9": float(np.percentile(ms, 99.9)),
        "max": float(ms.max()),
        "n": int(ms.size),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", required=True, help="artifact to serve (e.g. demo-out/artifacts/int8)")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument(
        "--cycles", type=int, default=1000, help="cycles of the serve loop, and bare round trips, per mode"
    )
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    policy = Policy.load(args.artifact)
    out = Path(args.out)
    rows, results, hist, served = [], {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        pki = Path(tmp)
        plc_cert, plc_key = make_certificate(pki, "plc", "urn:rl2edge:plc", "localhost")
        cli_cert, cli_key = make_certificate(pki, "serve", "urn:rl2edge:serve", "localhost")
        modes = {
            "none": ([], SecurityConfig()),
            "sign_and_encrypt": (
                [
                    "--security",
                    "sign_and_encrypt",
                    "--cert",
                    str(plc_cert),
                    "--key",
                    str(plc_key),
                    "--trust",
                    str(cli_cert),
                ],
                SecurityConfig("sign_and_encrypt", cli_cert, cli_key, trusted=(plc_cert,)),
            ),
        }
        for mode, (sim_args, client_sec) in modes.items():
            url = f"opc.tcp://127.0.0.1:{free_port()}"
            with plc_sim(args.env, url, sim_args, pki / f"sim-{mode}.log"):
                bridge = BridgeConfig(url, security=client_sec)
                action = [0.0] * (1 if policy.discrete else int(policy.action_low.size))
                bare = asyncio.run(bare_round_trips(bridge, args.cycles, action))
                summary, served[mode] = asyncio.run(serve_loop(policy, bridge, args.cycles, args.period_ms))
            lat = summary["latency_ms"]
            results[mode] = {
                "bare_read_write_ms": _stats(bare),
                "serve_loop": summary,
                "reference_ms": REFERENCE_MS[mode],
            }
            hist[mode] = bare
            b = results[mode]["bare_read_write_ms"]
            ref = REFERENCE_MS[mode]
            rows.append(
                [
                    mode,
                    "bare Read+Write",
                    b["n"],
                    f"{b['p50']:.2f}",
                    f"{b['p99']:.2f}",
                    f"{b['max']:.2f}",
                    "-",
                    f"{ref['p50']} / {ref['p99']} / {ref['max']}",
                ]
            )
            rows.append(
                [
                    mode,
                    f"serve loop ({args.period_ms:g} ms period)",
                    summary["cycles"],
                    f"{lat['p50']:.2f}",
                    f"{lat['p99']:.2f}",
                    f"{lat['max']:.2f}",
                    summary["deadline_misses"],
                    "-",
                ]
            )
    md = (
        f"Loop latency on loopback, {args.cycles} cycles per row, artifact {args.artifact} "
        f"({policy.manifest.quantization['mode']}); serve latency is from each cycle's scheduled start to the end "
        "of its Write (50 ms budget).\n\n"
        + markdown_table(
            [
                "security",
                "what",
                "n",
                "p50 ms",
                "p99 ms",
                "max ms",
                "deadline misses",
                "REFERENCE.md p50 / p99 / max ms",
            ],
            rows,
        )
    )
    data = {"artifact": args.artifact, "cycles": args.cycles, "period_ms": args.period_ms, "results": results}
    write_results("loop_latency", data, md, out)
    _plot(hist, served, out / "loop_latency.png")
    print(md)
    return data


def _plot(bare: dict[str, np.ndarray], served: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {path.name}")
        return

    fig, ax = plt.subplots(figsize=(7, 4))
    bins = np.geomspace(0.1, 100, 80)
    for i, (mode, ms) in enumerate(bare.items()):
        ax.hist(ms, bins=bins, alpha=0.35, color=f"C{i}", label=f"bare Read+Write, {mode}")
        h = served[mode]  # the loop's own fixed-bucket histogram, regrouped onto the same bins
        centers = np.sqrt(h.edges[:-1] * h.edges[1:])
        counts, _ = np.histogram(centers, bins=bins, weights=h.counts[1:-1])
        ax.stairs(counts, bins, color=f"C{i}", linewidth=1.8, label=f"serve loop, {mode}")
    ax.axvline(50, color="red", label="50 ms budget")
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("cycles")
    ax.legend(fontsize=8)
    ax.set_title("OPC UA control-loop latency on loopback")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
