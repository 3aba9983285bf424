"""The metrics port under abuse, against the real `rl2edge serve`: plc-sim (realtime, on its own clock, as
a plant) and serve with `--metrics-port`, in three phases of equal length, side by side in one run:

- quiet: nobody scrapes;
- scrapers: 4 threads (in another process) GET /metrics back to back, as fast as answers come;
- flood: 4,000 connections opened to the port and held, a few bytes sent on some, then dropped.

For each phase: serve's cycles, deadline misses, latency p50/p99/max (from its summary, rewritten every
stats interval, differenced between phases), the answers the scrapers got, and the log serve wrote (lines,
bytes, tracebacks).

    python benchmarks/metrics_flood.py --artifact demo-out/artifacts/int8 [--seconds 30] [--period-ms 20]

Writes benchmarks/results/metrics_flood.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from testkit.plc import free_port

EXE = str(Path(sys.executable).with_name("rl2edge"))

# The attackers run in a process of their own: their CPU is the machine's, not serve's GIL.
SCRAPERS = textwrap.dedent(
    """
    import sys, threading, time, urllib.request
    url, seconds = sys.argv[1], float(sys.argv[2])
    counts = {"ok": 0, "other": 0}
    def scrape():
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    r.read()
                    counts["ok" if r.status == 200 else "other"] += 1
            except Exception:
                counts["other"] += 1
    threads = [threading.Thread(target=scrape) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(counts["ok"], counts["other"])
    """
)
FLOOD = textwrap.dedent(
    """
    import socket, sys, time
    port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    held, refused = [], 0
    end = time.monotonic() + seconds
    for i in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            if i % 3 == 1:
                s.sendall(b"GET /metr")  # half a request
            elif i % 3 == 2:
                s.sendall(b"\\x16\\x03\\x01garbage\\r\\n\\r\\n")  # not HTTP
            held.append(s)
        except OSError:
            refused += 1
        if time.monotonic() > end:
            break
    time.sleep(max(0.0, end - time.monotonic()))
    for s in held:
        s.close()
    print(len(held), refused)
    """
)


def _summary(
    path: Path, timeout_s: float = 5.0, serve: subprocess.Popen[bytes] | None = None
) -> dict[str, Any]:
    """The summary serve rewrites each stats interval. The first one waits for serve's start (the imports and
    the model's child-process probe take some 10 s on a loaded 2-core machine), and gives up if serve ends."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            if time.monotonic() > deadline or (serve is not None and serve.poll() is not None):
                raise RuntimeError(f"no summary at {path}") from None
            time.sleep(0.1)


def _phase(name: str, seconds: float, summary: Path, attack: list[str] | None) -> dict[str, Any]:
    before = _summary(summary)
    out = ""
    if attack is None:
        time.sleep(seconds)
    else:
        out = subprocess.run(attack, capture_output=True, text=True, timeout=seconds + 120).stdout.strip()
    time.sleep(1.2)  # one more stats interval: the summary covers the phase
    after = _summary(summary)
    return {
        "phase": name,
        "cycles": after["cycles"] - before["cycles"],
        "deadline_misses": after["deadline_misses"] - before["deadline_misses"],
        "latency_ms_run": after["latency_ms"],
        "attacker": out,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of each phase (default: 30)")
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--connections", type=int, default=4000)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    url, port = f"opc.tcp://127.0.0.1:{free_port()}", free_port()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        summary, log = work / "serve.json", work / "serve.log"
        sim = subprocess.Popen(
            [EXE, "plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "realtime",
             "--period-ms", str(args.period_ms)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        serve = subprocess.Popen(
            [EXE, "serve", args.artifact, "--endpoint", url, "--period-ms", str(args.period_ms),
             "--metrics-port", str(port), "--summary", str(summary), "--stats-interval", "1"],
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _summary(summary, 120.0, serve)  # serve is up and has written its first summary
            time.sleep(2.0)
            phases = [_phase("quiet", args.seconds, summary, None)]
            scrape = [sys.executable, "-c", SCRAPERS, f"http://127.0.0.1:{port}/metrics", str(args.seconds)]
            phases.append(_phase("scrapers (4 threads, back to back)", args.seconds, summary, scrape))
            flood = [sys.executable, "-c", FLOOD, str(port), str(args.connections), str(args.seconds)]
            phases.append(_phase(f"flood ({args.connections} connections)", args.seconds, summary, flood))
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # still answering
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                health = s.recv(64).split(b"\r\n")[0].decode()
        finally:
            serve.terminate()
            serve.wait(timeout=30)
            sim.terminate()
            sim.wait(timeout=30)
        text = log.read_text(errors="replace")
        final = json.loads(summary.read_text())
    lines = text.splitlines()
    data = {
        "period_ms": args.period_ms,
        "deadline_ms": final["deadline_ms"],
        "seconds_per_phase": args.seconds,
        "phases": phases,
        "healthz_after": health,
        "log": {"lines": len(lines), "bytes": len(text.encode()), "tracebacks": text.count("Traceback")},
        "serve_exit": serve.returncode,
    }
    rows = []
    for p in phases:
        got = p["attacker"].split()
        extra = {"quiet": "-"}.get(p["phase"], f"{got[0]} / {got[1]}" if len(got) == 2 else p["attacker"])
        rows.append([p["phase"], p["cycles"], p["deadline_misses"], extra])
    md = (
        f"serve at a {args.period_ms:g} ms period ({final['deadline_ms']:g} ms deadline) against plc-sim "
        f"(realtime), `--metrics-port` under abuse, {args.seconds:g} s per phase, one run. Attacker column: "
        "scrapers' answers 200 / other; flood: connections held / refused.\n\n"
        + markdown_table(["phase", "serve cycles", "deadline misses", "attacker"], rows)
        + f"\n\nserve's log over the run: {len(lines)} lines, {len(text.encode())} bytes, "
        f"{data['log']['tracebacks']} tracebacks; /healthz after the flood: `{health}`; serve's latency "
        f"over the whole run p50 {final['latency_ms']['p50']:.2f} ms, p99 {final['latency_ms']['p99']:.2f} ms, "
        f"max {final['latency_ms']['max']:.2f} ms; exit {serve.returncode}."
    )
    write_results("metrics_flood", data, md, Path(args.out))
    _plot(phases, Path(args.out) / "metrics_flood.png")
    print(md)
    return data


def _plot(phases: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3))
    names = [p["phase"] for p in phases]
    ax.bar(names, [p["deadline_misses"] for p in phases])
    ax.set_ylabel("deadline misses")
    ax.set_title("serve's deadline misses per phase")
    ax.tick_params(axis="x", labelsize=8)
    save_figure(fig, path)


if __name__ == "__main__":
    main()
