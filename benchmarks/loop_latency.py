"""Loop latency: the serve control loop against two OPC UA servers on loopback, each without security and
with Basic256Sha256 SignAndEncrypt: asyncua's plc-sim (--strict, realtime) and the node-opcua PLC
stand-in (typed scalars in its own namespace, a lockstep plant), each in its own process as a PLC
would be. Next to each serve loop, the bare requests it must make, interleaved in one run: one Read and
the two Writes of the handshake (action + heartbeat + status, then the answered sequence number), and
the one-Write form that the handshake replaced, whose difference is the handshake's cost.

    python benchmarks/loop_latency.py --artifact demo-out/artifacts/int8 [--cycles 1500] [--period-ms 20]

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.plc_bridge.client import BridgeConfig, PlcClient, plant_io_of
from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.nodemap import NodeMap
from rl2edge.plc_bridge.security import SecurityConfig, make_certificate
from rl2edge.plc_bridge.sim import free_port
from rl2edge.runtime import Policy
from tests.standin_plc import StandinPlc

# ../shared/REFERENCE.md: asyncua 2.1, one batched Read + one batched Write, two processes on loopback.
REFERENCE_MS = {
    "none": {"p50": 0.83, "p99": 1.21, "max": 4.7},
    "sign_and_encrypt": {"p50": 1.13, "p99": 2.41, "max": 5.7},
}


@contextlib.contextmanager
def plc_sim(env_id: str, url: str, sec_args: list[str], log: Path) -> Iterator[NodeMap | None]:
    exe = str(Path(sys.executable).with_name("rl2edge"))
    args = [
        "plc-sim",
        "--env",
        env_id,
        "--endpoint",
        url,
        "--mode",
        "realtime",
        "--period-ms",
        "20",
        "--strict",
    ]
    proc = subprocess.Popen([exe, *args, *sec_args], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", int(url.rsplit(":", 1)[1]))) == 0:
                    break
            time.sleep(0.2)
        time.sleep(0.5)
        yield None  # the default node map
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def standin(
    env_id: str, url: str, pki: dict[str, tuple[Path, Path]], secure: bool, work: Path
) -> Iterator[NodeMap]:
    sec: dict[str, Any] = {}
    if secure:
        cert, key = pki["plc"]
        sec = {
            "security": "sign_and_encrypt",
            "certificate": cert,
            "private_key": key,
            "trusted": [pki["serve"][0]],
        }
    port = int(url.rsplit(":", 1)[1])
    with StandinPlc(env_id, seed=0, port=port, workdir=work, **sec) as plc:
        m = plc.node_map(nsu=True)
        yield NodeMap(
            observation=tuple(m["observation"]),
            observation_seq=m["observation_seq"],
            action=tuple(m["action"]),
            action_seq=m["action_seq"],
            heartbeat=m["heartbeat"],
            status=m["status"],
        )


async def bare_round_trips(bridge: BridgeConfig, policy: Policy, n: int) -> dict[str, np.ndarray]:
    """The floor, interleaved: one Read and the handshake's two Writes; one Read and a single Write."""
    times = {"handshake": np.empty(n), "one_write": np.empty(n)}
    action = [0.0] * plant_io_of(policy).action_size
    async with PlcClient(bridge, plant_io_of(policy)) as plc:
        for _ in range(20):
            await plc.read()
        for i in range(n):
            for kind in ("handshake", "one_write") if i % 2 else ("one_write", "handshake"):
                t0 = time.perf_counter()
                reading = await plc.read()
                write = plc.answer if kind == "handshake" else plc.answer_in_one_request
                await write(action, 0, reading.sequence)
                times[kind][i] = (time.perf_counter() - t0) * 1e3
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
        "--cycles", type=int, default=1500, help="cycles of the serve loop, and of each bare form, per row"
    )
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--servers", default="asyncua,node-opcua", help="comma-separated: asyncua, node-opcua")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    policy = Policy.load(args.artifact)
    out = Path(args.out)
    rows, results, hist, served = [], {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pki = {n: make_certificate(work, n, f"urn:rl2edge:{n}", "localhost") for n in ("plc", "serve")}
        (plc_cert, _), (cli_cert, cli_key) = pki["plc"], pki["serve"]
        sim_sec = ["--security", "sign_and_encrypt", "--cert", str(plc_cert), "--key", str(pki["plc"][1])]
        client_sec = {
            "none": SecurityConfig(),
            "sign_and_encrypt": SecurityConfig("sign_and_encrypt", cli_cert, cli_key, trusted=(plc_cert,)),
        }
        for server in args.servers.split(","):
            for mode in ("none", "sign_and_encrypt"):
                url = f"opc.tcp://127.0.0.1:{free_port()}"
                secure = mode != "none"
                target = (
                    plc_sim(
                        args.env,
                        url,
                        [*sim_sec, "--trust", str(cli_cert)] if secure else [],
                        work / f"sim-{mode}.log",
                    )
                    if server == "asyncua"
                    else standin(args.env, url, pki, secure, work / f"standin-{mode}")
                )
                with target as node_map:
                    bridge = BridgeConfig(url, security=client_sec[mode])
                    if node_map is not None:
                        bridge = BridgeConfig(url, node_map=node_map, security=client_sec[mode])
                    bare = asyncio.run(bare_round_trips(bridge, policy, args.cycles))
                    summary, served[(server, mode)] = asyncio.run(
                        serve_loop(policy, bridge, args.cycles, args.period_ms)
                    )
                key = f"{server}/{mode}"
                hs, one, lat = _stats(bare["handshake"]), _stats(bare["one_write"]), summary["latency_ms"]
                results[key] = {
                    "bare_read_two_writes_ms": hs,
                    "bare_read_one_write_ms": one,
                    "handshake_cost_p50_ms": hs["p50"] - one["p50"],
                    "serve_loop": summary,
                    "serve_over_bare_p50": lat["p50"] / hs["p50"],
                    "serve_over_bare_p99": lat["p99"] / hs["p99"],
                }
                hist[key] = bare["handshake"]
                ref = REFERENCE_MS[mode] if server == "asyncua" else None
                rows.append(
                    [
                        server,
                        mode,
                        "bare Read + 1 Write",
                        one["n"],
                        *_fmt(one),
                        "-",
                        "-",
                        f"{ref['p50']} / {ref['p99']} / {ref['max']}" if ref else "-",
                    ]
                )
                rows.append(
                    [server, mode, "bare Read + 2 Writes (handshake)", hs["n"], *_fmt(hs), "-", "-", "-"]
                )
                rows.append(
                    [
                        server,
                        mode,
                        f"serve loop ({args.period_ms:g} ms period)",
                        summary["cycles"],
                        *_fmt(lat),
                        summary["deadline_misses"],
                        f"{lat['p50'] / hs['p50']:.2f} / {lat['p99'] / hs['p99']:.2f}",
                        "-",
                    ]
                )
    md = (
        f"Loop latency on loopback, {args.cycles} cycles per row, artifact {args.artifact} "
        f"({policy.manifest.quantization['mode']}). Serve latency is from each cycle's scheduled start to the end "
        "of its last Write (50 ms budget); the bare rows are back-to-back requests, the two forms interleaved.\n\n"
        + markdown_table(
            [
                "server",
                "security",
                "what",
                "n",
                "p50 ms",
                "p99 ms",
                "max ms",
                "deadline misses",
                "serve / bare handshake p50 / p99",
                "REFERENCE.md p50 / p99 / max ms",
            ],
            rows,
        )
        + "\n\nThe handshake's cost (p50 of Read + 2 Writes minus Read + 1 Write): "
        + ", ".join(f"{k} {v['handshake_cost_p50_ms']:+.2f} ms" for k, v in results.items())
        + ".\n"
    )
    data = {"artifact": args.artifact, "cycles": args.cycles, "period_ms": args.period_ms, "results": results}
    write_results("loop_latency", data, md, out)
    _plot(hist, served, out / "loop_latency.png")
    print(md)
    return data


def _fmt(s: dict[str, float]) -> list[str]:
    return [f"{s['p50']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}"]


def _plot(bare: dict[str, np.ndarray], served: dict[tuple[str, str], Any], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {path.name}")
        return
    servers = sorted({k.split("/")[0] for k in bare})
    fig, axes = plt.subplots(1, len(servers), figsize=(6 * len(servers), 4), squeeze=False, sharey=True)
    bins = np.geomspace(0.1, 100, 80)
    for ax, server in zip(axes[0], servers, strict=True):
        for i, mode in enumerate(("none", "sign_and_encrypt")):
            if f"{server}/{mode}" not in bare:
                continue
            ax.hist(
                bare[f"{server}/{mode}"],
                bins=bins,
                alpha=0.35,
                color=f"C{i}",
                label=f"bare Read + 2 Writes, {mode}",
            )
            # the loop's own fixed-bucket histogram, regrouped onto the same bins
            h = served[(server, mode)]
            centers = np.sqrt(h.edges[:-1] * h.edges[1:])
            counts, _ = np.histogram(centers, bins=bins, weights=h.counts[1:-1])
            ax.stairs(counts, bins, color=f"C{i}", linewidth=1.8, label=f"serve loop, {mode}")
        ax.axvline(50, color="red", label="50 ms budget")
        ax.set_xscale("log")
        ax.set_xlabel("latency (ms)")
        ax.set_title(f"{server} server")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("cycles")
    fig.suptitle("OPC UA control-loop latency on loopback")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
