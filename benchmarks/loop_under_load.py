"""The serve loop under load: `rl2edge serve` against plc-sim (realtime mode, publishing at serve's period)
at each period, with 0, 1 and 2 busy neighbours (a Python busy loop per core) and with two busy neighbours
plus a memory-hungry one (a process rewriting 1 GiB of pages), each without and with `--realtime`, side by
side in one run. Each row: deadline misses, latency p50/p99/p99.9/max, CPU per cycle, and the scheduler
in force as serve's summary records it.

plc-sim stands for a PLC, which has a CPU of its own: where the process may, it runs under SCHED_FIFO 40
in both arms (below serve's 50), so that a miss measures serve, not a starved simulator.

    python benchmarks/loop_under_load.py --artifact demo-out/artifacts/int8 [--cycles 1500] \
        [--periods 10,20] [--loads 0,1,2,2+mem] [--must-show-cycles 6000]

`--must-show-cycles` adds the issue's pair: a 10 ms period and 10 ms deadline with two busy cores, that
many cycles, without and with --realtime. Writes benchmarks/results/loop_under_load.{json,md,png}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.plc_bridge.realtime import may_lock_memory
from testkit.plc import free_port, wait_for_server

_logger = logging.getLogger("benchmarks.loop_under_load")
EXE = str(Path(sys.executable).with_name("rl2edge"))
BUSY = "while True: pass"
# 1 GiB touched page by page, again and again: page-cache and TLB pressure, memory bandwidth taken
MEMORY_HOG = "import numpy as np\na = np.ones(1 << 27)\nwhile True:\n    a[::512] += 1.0\n"


def _fifo(priority: int) -> list[str]:
    """`chrt -f PRIORITY` where this process may give SCHED_FIFO, else nothing."""
    chrt = shutil.which("chrt")
    if chrt is None or subprocess.run([chrt, "-f", str(priority), "true"], check=False).returncode != 0:
        return []
    return [chrt, "-f", str(priority)]


@contextlib.contextmanager
def neighbours(load: str) -> Iterator[None]:
    """`0`, `1`, `2`: that many busy loops; `2+mem`: two and the memory hog."""
    busy, mem = (int(load.split("+")[0]), load.endswith("+mem"))
    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    if mem:
        procs.append(subprocess.Popen([sys.executable, "-c", MEMORY_HOG]))
    try:
        time.sleep(1.0 if procs else 0.0)  # running before serve starts
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


@contextlib.contextmanager
def plc(period_ms: float, work: Path) -> Iterator[str]:
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    cmd = [*_fifo(40), EXE, "plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "realtime",
           "--period-ms", f"{period_ms:g}"]  # fmt: skip
    with open(work / "sim.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_server(url, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def serve_once(
    artifact: Path, url: str, period_ms: float, cycles: int, realtime: bool, work: Path, record: bool = False
) -> dict[str, Any]:
    summary = work / "serve.json"
    cmd = [EXE, "serve", str(artifact), "--endpoint", url, "--period-ms", f"{period_ms:g}", "--deadline-ms",
           f"{period_ms:g}", "--cycles", str(cycles), "--summary", str(summary), "--stats-interval", "3600"]  # fmt: skip
    if realtime:
        cmd.append("--realtime")
    if record:  # the flight recorder on: what it adds to misses and latency under the same load
        cmd += ["--record", str(work / "trace")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=cycles * period_ms / 1e3 * 4 + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"serve failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    s = json.loads(summary.read_text())
    return {
        "cycles": s["cycles"],
        "deadline_misses": s["deadline_misses"],
        "latency_ms": s["latency_ms"],
        "cpu_ms_per_cycle": s["cpu_ms_per_cycle"],
        "scheduler": s["realtime"]["scheduler"],
        "stale": s["stale"],
        "stale_after": s["stale_after"],
    }


def measure(
    artifact: Path,
    period_ms: float,
    load: str,
    cycles: int,
    realtime: bool,
    plc_period_ms: float | None = None,
    record: bool = False,
) -> dict[str, Any]:
    """One serve run; the plant publishes every `plc_period_ms` (default: serve's period); `record`: with
    serve's flight recorder on."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        plc(plc_period_ms or period_ms, Path(tmp)) as url,
        neighbours(load),
    ):
        row = serve_once(artifact, url, period_ms, cycles, realtime, Path(tmp), record)
    row.update(
        period_ms=period_ms,
        load=load,
        realtime=realtime,
        plc_period_ms=plc_period_ms or period_ms,
        recording=record,
    )
    _logger.info(
        "%g ms, load %s, realtime %s, recording %s: %d misses of %d, p99 %.2f ms, max %.2f ms",
        period_ms, load, realtime, record, row["deadline_misses"], row["cycles"], row["latency_ms"]["p99"],
        row["latency_ms"]["max"],
    )  # fmt: skip
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["period ms", "neighbours", "--realtime", "--record", "cycles", "misses", "p50 ms", "p99 ms",
            "p99.9 ms", "max ms", "CPU ms/cycle", "scheduler"]  # fmt: skip
    body = [
        [f"{r['period_ms']:g}", r["load"], "yes" if r["realtime"] else "no",
         "yes" if r.get("recording") else "no", str(r["cycles"]),
         str(r["deadline_misses"]), *(f"{r['latency_ms'][k]:.2f}" for k in ("p50", "p99", "p99.9", "max")),
         f"{r['cpu_ms_per_cycle']:.3f}", r["scheduler"]]
        for r in rows
    ]  # fmt: skip
    return markdown_table(head, body)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    rows = [r for r in rows if not r.get("recording")]  # the recorder's arm is in the table
    labels = [f"{r['period_ms']:g} ms\n{r['load']}" for r in rows if not r["realtime"]]
    for offset, rt in ((-0.2, False), (0.2, True)):
        values = [r["latency_ms"]["max"] for r in rows if r["realtime"] == rt]
        ax.bar([i + offset for i in range(len(values))], values, 0.4, label="--realtime" if rt else "default")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("max cycle latency (ms)")
    ax.set_title("serve under load: worst cycle, without and with --realtime")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--artifact", required=True)
    p.add_argument("--cycles", type=int, default=1500)
    p.add_argument("--periods", default="10,20")
    p.add_argument("--loads", default="0,1,2,2+mem")
    p.add_argument("--must-show-cycles", type=int, default=0)
    p.add_argument(
        "--slow-plant-cycles",
        type=int,
        default=0,
        help="also serve a 10 Hz plant at 20 ms this long (stale count)",
    )
    p.add_argument(
        "--record-arm",
        action="store_true",
        help="also each row with serve --record (the flight recorder on), side by side",
    )
    p.add_argument("--out", default=str(RESULTS))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("asyncua").setLevel(logging.WARNING)  # the readiness probe's client
    artifact = Path(args.artifact)
    # where this process may not use SCHED_FIFO, --realtime is refused (one line): the default arm alone
    arms = (False, True) if _fifo(1) and may_lock_memory() else (False,)
    if len(arms) == 1:
        _logger.warning(
            "this process may not use SCHED_FIFO or lock its memory: measuring without --realtime only"
        )
    rows = []
    for period in (float(x) for x in args.periods.split(",")):
        for load in args.loads.split(","):
            for realtime in arms:  # side by side: the arms of a row one after the other
                for record in (False, True) if args.record_arm else (False,):
                    rows.append(measure(artifact, period, load, args.cycles, realtime, record=record))
    must_show = (
        [measure(artifact, 10.0, "2", args.must_show_cycles, rt) for rt in arms]
        if args.must_show_cycles
        else []
    )
    slow = (
        [measure(artifact, 20.0, "0", args.slow_plant_cycles, False, 100.0)] if args.slow_plant_cycles else []
    )
    md = table(rows)
    if must_show:
        md += f"\n\nThe issue's pair: 10 ms period and deadline, two busy cores, {args.must_show_cycles} cycles.\n\n"
        md += table(must_show)
    if slow:
        r = slow[0]
        md += (
            f"\n\nA 10 Hz plant (plc-sim publishing every 100 ms) served at a 20 ms period for {r['cycles']} cycles: "
            f"{r['stale']} stale, {r['deadline_misses']} deadline misses; staleness rule in force: {r['stale_after']}."
        )
    data = {"rows": rows, "must_show": must_show, "slow_plant": slow, "cycles": args.cycles, "plc_sim_fifo": bool(_fifo(40)),
            "cores": os.cpu_count()}  # fmt: skip
    out = Path(args.out)
    write_results("loop_under_load", data, md, out)
    plot(rows, out / "loop_under_load.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
