"""Soak: `rl2edge serve` (the installed CLI, its own process) against the node-opcua PLC stand-in for a
long run at a fixed period, with the heartbeat started near the top of its UInt16 so that it wraps
within the first minute, and the PLC's Int32 sequence number near the top of its range.

The stand-in is laid out as a real PLC's data block (typed scalars in its own namespace URI, reached
by nsu= NodeIds) and steps its plant (a Gymnasium env) once per answered observation, as a lockstep
PLC does. Every minute the benchmark records serve's RSS, the PLC-side heartbeat and sequence number,
and the stand-in's write counts; at the end, serve's summary.

    python benchmarks/plc_soak.py --artifact demo-out/artifacts/int8 [--minutes 30] [--period-ms 20]

Writes benchmarks/results/plc_soak.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from testkit.standin_plc import StandinPlc

STATS_LINE = re.compile(r"cycles (\d+) \|.*deadline misses (\d+)")
HEARTBEAT_START = 65_000  # UInt16: wraps after 536 cycles, about 11 s at 20 ms
SEQUENCE_START = 2**31 - 1000  # Int32: wraps after 1000 answered observations


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_serve(
    artifact: str, plc: StandinPlc, work: Path, period_ms: float
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`rl2edge serve` (the installed CLI, its own process) against the stand-in through an nsu= node map,
    a stats line a minute; (process, summary path, log path)."""
    node_map = work / "map.yaml"
    node_map.write_text(yaml.safe_dump(plc.node_map(nsu=True)))
    summary_path, log = work / "serve.json", work / "serve.log"
    exe = str(Path(sys.executable).with_name("rl2edge"))
    cmd = [exe, "serve", artifact, "--endpoint", plc.endpoint, "--map", str(node_map)]
    cmd += ["--period-ms", str(period_ms), "--summary", str(summary_path), "--stats-interval", "60"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT), summary_path, log


def stop_serve(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (serve writes SHUTDOWN and its summary), then its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=60)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", required=True, help="artifact to serve (a CartPole-v1 policy by default)")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with StandinPlc(
            args.env,
            seed=0,
            initial={"Heartbeat": HEARTBEAT_START, "ObsSeq": SEQUENCE_START},
            workdir=work / "plc",
        ) as plc:
            proc, summary_path, log = start_serve(args.artifact, plc, work, args.period_ms)
            t0 = time.monotonic()
            try:
                end = t0 + args.minutes * 60
                next_sample = t0 + 5
                while time.monotonic() < end and proc.poll() is None:
                    time.sleep(max(0.0, min(next_sample, end) - time.monotonic()))
                    if time.monotonic() >= next_sample:
                        v, st = plc.get(), plc.stats()
                        stats_lines = STATS_LINE.findall(log.read_text(errors="replace"))
                        samples.append(
                            {
                                "t_s": round(time.monotonic() - t0, 1),
                                "rss_mb": rss_mb(proc.pid),
                                "heartbeat": v["Heartbeat"],
                                "obs_seq": v["ObsSeq"],
                                "act_seq": v["ActSeq"],
                                "status": v["Status"],
                                "plc_writes_ok": st["writes"]["ok"],
                                "plc_writes_rejected": st["writes"]["rejected"],
                                "plc_sessions": st["sessions"],
                                "plant_steps": plc.steps,
                                "episodes": len(plc.returns),
                                # serve's own cumulative counters, from its last per-minute log line
                                "serve_cycles": int(stats_lines[-1][0]) if stats_lines else None,
                                "serve_deadline_misses": int(stats_lines[-1][1]) if stats_lines else None,
                                "host_load_1min": os.getloadavg()[0],
                            }
                        )
                        print(json.dumps(samples[-1]), flush=True)
                        next_sample += 60
            finally:
                rc = stop_serve(proc)
            summary = json.loads(summary_path.read_text())
            log_text = log.read_text()
            returns = list(plc.returns)
    heartbeat_wraps = sum(1 for a, b in itertools.pairwise(samples) if b["heartbeat"] < a["heartbeat"])
    data = {
        "artifact": args.artifact,
        "env": args.env,
        "minutes": args.minutes,
        "period_ms": args.period_ms,
        "serve_exit_code": rc,
        "summary": summary,
        "samples": samples,
        "episodes": len(returns),
        "mean_return": sum(returns) / len(returns) if returns else None,
        "heartbeat_start": HEARTBEAT_START,
        "sequence_start": SEQUENCE_START,
        "sequence_wrapped": any(s["obs_seq"] < 0 for s in samples),
        "warnings_in_log": len(re.findall(r" WARNING ", log_text)),
        "rss_growth_mb": samples[-1]["rss_mb"] - samples[0]["rss_mb"] if samples else None,
    }
    lat = summary["latency_ms"]
    md = (
        f"Soak: `rl2edge serve` against the node-opcua PLC stand-in (typed scalars, nsu= NodeIds, lockstep plant "
        f"{args.env}), {args.minutes:g} min at {args.period_ms:g} ms, heartbeat UInt16 from {HEARTBEAT_START}, "
        f"sequence Int32 from {SEQUENCE_START}.\n\n"
        + markdown_table(
            [
                "cycles",
                "ok",
                "invalid",
                "stale",
                "refused writes",
                "reconnects",
                "deadline misses",
                "p50 ms",
                "p99 ms",
                "max ms",
                "RSS first/last MB",
                "plant steps",
                "episodes",
            ],
            [
                [
                    summary["cycles"],
                    summary["ok"],
                    summary["invalid"],
                    summary["stale"],
                    summary["write_rejected"],
                    summary["reconnects"],
                    summary["deadline_misses"],
                    f"{lat['p50']:.2f}",
                    f"{lat['p99']:.2f}",
                    f"{lat['max']:.2f}",
                    f"{samples[0]['rss_mb']:.1f} / {samples[-1]['rss_mb']:.1f}" if samples else "-",
                    samples[-1]["plant_steps"] if samples else "-",
                    len(returns),
                ]
            ],
        )
        + f"\n\nThe PLC-side heartbeat wrapped {heartbeat_wraps} times between the per-minute samples (it wraps "
        f"every {65536 * args.period_ms / 60000:.1f} min at this period); the Int32 sequence number "
        f"{'crossed' if data['sequence_wrapped'] else 'did not cross'} its wrap; the PLC refused "
        f"{samples[-1]['plc_writes_rejected'] if samples else '-'} node writes; serve exited {rc}.\n"
    )
    write_results("plc_soak", data, md, Path(args.out))
    _plot(samples, Path(args.out) / "plc_soak.png")
    print(md)
    return data


def _plot(samples: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None or not samples:
        return
    t = [s["t_s"] / 60 for s in samples]
    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(7, 7), sharex=True)
    a1.plot(t, [s["rss_mb"] for s in samples], marker=".")
    a1.set_ylabel("serve RSS (MB)")
    a2.plot(t, [s["heartbeat"] for s in samples], marker=".", label="heartbeat (UInt16)")
    a2.set_ylabel("heartbeat at sample")
    a3.plot(
        t,
        [s.get("serve_deadline_misses") or 0 for s in samples],
        marker=".",
        label="deadline misses (cumulative)",
    )
    a3.plot(t, [s.get("host_load_1min", 0) for s in samples], marker=".", label="host load, 1 min")
    a3.legend(fontsize=8)
    a3.set_xlabel("minutes")
    a1.set_title("serve against the node-opcua PLC stand-in")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
