"""Policy updates under load: `rl2edge serve --watch` (the installed CLI, its own process) at a 20 ms
period against plc-sim (lockstep CartPole), its artifact symlink swapped between two policies of the same
env N times and pointed at three artifacts that must be refused (another env, a model whose bytes do not
match the manifest's sha256, a policy that disagrees with the serving one everywhere). Each condition runs
once on a quiet machine and once with one core kept busy by another process.

What it answers: do the updates cost any cycle its deadline? serve's summary splits cycle latency into
the cycles while an update was under way (load in a worker thread, shadow run, takeover cycle) and all
the others, and counts the deadline misses in each.

    python benchmarks/policy_swap.py --a ART_A --b ART_B1,ART_B2 --other ART_OF_ANOTHER_ENV --flipped ART_FLIPPED

A and B: artifacts of one CartPole-v1 run (e.g. its fp32 export, and int8,fp16,dynamic, which agree); flipped:
`testkit.runs.flipped_run` of that run, exported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.plc_bridge.metrics import parse_metrics
from testkit.plc import free_port

EXE = str(Path(sys.executable).with_name("rl2edge"))


SCRAPES_MS: list[float] = []
"""Round trip of every /metrics scrape (a client on the same machine): what a scrape costs serve's loop at most."""


def _metrics(port: int) -> dict[Any, float]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    SCRAPES_MS.append((time.perf_counter() - t0) * 1e3)
    return parse_metrics(text)


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout_s} s")


def _corrupt_copy(artifact: Path, out: Path) -> Path:
    shutil.copytree(artifact, out)
    model = bytearray((out / "policy.tflite").read_bytes())
    model[len(model) // 2] ^= 0xFF
    (out / "policy.tflite").write_bytes(bytes(model))
    return out


def run_condition(args: argparse.Namespace, busy: bool, work: Path) -> dict[str, Any]:
    url, port = f"opc.tcp://127.0.0.1:{free_port()}", free_port()
    current, summary_path = work / "current", work / "serve.json"
    a, bs = Path(args.a).resolve(), [Path(b).resolve() for b in args.b.split(",")]
    current.symlink_to(a)
    refusals = [Path(args.other).resolve(), _corrupt_copy(a, work / "corrupt"), Path(args.flipped).resolve()]
    # A -> B1 -> A -> B2 ...: each B is new to the process once (its model probed in a child process), A
    # and the Bs seen before are not (the probe is cached by the model's sha256).
    plan = [(bs[(i // 2) % len(bs)] if i % 2 == 0 else a, "accepted") for i in range(args.swaps)]
    plan += [(r, "refused") for r in refusals]
    procs: list[subprocess.Popen[bytes]] = []
    sim = subprocess.Popen(
        [EXE, "plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "lockstep"],
        stdout=(work / "sim.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    procs.append(sim)
    try:
        if busy:  # one of the cores spinning in another process, as a second job on the device would
            procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        time.sleep(2.0)
        cmd = [EXE, "serve", str(current), "--endpoint", url, "--period-ms", str(args.period_ms)]
        cmd += [
            "--summary",
            str(summary_path),
            "--metrics-port",
            str(port),
            "--watch",
            "--watch-interval",
            "0.2",
        ]
        serve = subprocess.Popen(cmd, stdout=(work / "serve.log").open("wb"), stderr=subprocess.STDOUT)
        procs.append(serve)
        _wait(lambda: _metrics(port)[("rl2edge_ready", ())] == 1, 60, "serve ready")
        time.sleep(args.settle_s)
        done = {"accepted": 0, "refused": 0}
        for target, outcome in plan:
            nxt = work / "current.next"
            nxt.symlink_to(target)
            os.replace(nxt, current)
            done[outcome] += 1
            key = ("rl2edge_policy_updates_total", (("result", outcome),))
            try:
                _wait(
                    lambda key=key, n=done[outcome]: _metrics(port)[key] >= n,
                    60,
                    f"{outcome} #{done[outcome]}",
                )
            except RuntimeError as exc:
                log = (work / "serve.log").read_text()[-3000:]
                raise RuntimeError(f"{exc} (pointing at {target}); serve's log:\n{log}") from None
            time.sleep(args.settle_s)
        serve.terminate()
        rc = serve.wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    s = json.loads(summary_path.read_text())
    pol = s["policy"]
    accepted = [u for u in pol["history"] if u["result"] == "accepted"]
    return {
        "condition": "one core busy" if busy else "quiet",
        "serve_exit_code": rc,
        "cycles": s["cycles"],
        "deadline_misses": s["deadline_misses"],
        "updates": pol["updates"],
        "update_cycles": pol["update_cycles_latency_ms"],
        "other_cycles": pol["other_cycles_latency_ms"],
        "takeover_latency_ms": [u["takeover_latency_ms"] for u in accepted],
        "load_s": [u["load_s"] for u in accepted],
        "refusal_reasons": [u["reason"] for u in pol["history"] if u["result"] == "refused"],
        "latency_ms": s["latency_ms"],
        "scrape_ms": _percentiles(SCRAPES_MS),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="artifact A (CartPole-v1)")
    ap.add_argument("--b", required=True, help="artifacts B (comma-separated): the same env, agreeing with A")
    ap.add_argument("--other", required=True, help="an artifact of another env (must be refused)")
    ap.add_argument(
        "--flipped", required=True, help="a CartPole artifact that disagrees with A (must be refused)"
    )
    ap.add_argument("--swaps", type=int, default=10, help="accepted swaps per condition (default: 10)")
    ap.add_argument("--period-ms", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=1.0, help="cycles between updates")
    ap.add_argument("--conditions", default="quiet,busy")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    rows = []
    for cond in args.conditions.split(","):
        SCRAPES_MS.clear()
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(run_condition(args, cond == "busy", Path(tmp)))
        print(json.dumps(rows[-1]), flush=True)
    data = {"period_ms": args.period_ms, "deadline_ms": 50.0, "swaps": args.swaps, "conditions": rows}
    md = _markdown(data)
    out = Path(args.out)
    write_results("policy_swap", data, md, out)
    _plot(rows, out / "policy_swap.png")
    print(md)
    return data


def _percentiles(values: list[float]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50": v[len(v) // 2], "p99": v[min(len(v) - 1, int(0.99 * len(v)))]}


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _markdown(data: dict[str, Any]) -> str:
    rows = []
    for r in data["conditions"]:
        u, o = r["update_cycles"], r["other_cycles"]
        rows.append(
            [
                r["condition"],
                f"{r['updates']['accepted']} / {r['updates']['refused']}",
                f"{u['cycles']}: {_f(u['p50'])} / {_f(u['p99'])} / {_f(u['max'])}",
                f"{o['cycles']}: {_f(o['p50'])} / {_f(o['p99'])} / {_f(o['max'])}",
                f"{u['deadline_misses']} / {r['deadline_misses']}",
                _f(max(r["takeover_latency_ms"], default=None)),
                f"{_f(r['scrape_ms'].get('p50'))} / {_f(r['scrape_ms'].get('p99'))} ({r['scrape_ms']['n']})",
                f"{_f(sorted(r['load_s'])[len(r['load_s']) // 2] if r['load_s'] else None)} / "
                f"{_f(max(r['load_s'], default=None))}",
            ]
        )
    table = markdown_table(
        [
            "condition",
            "accepted / refused",
            "update cycles: n, p50 / p99 / max ms",
            "other cycles: n, p50 / p99 / max ms",
            "misses in updates / all",
            "takeover cycle max ms",
            "/metrics round trip p50 / p99 ms (scrapes)",
            "load s (median / max)",
        ],
        rows,
    )
    return (
        f"# Policy updates under load ({data['swaps']} swaps A <-> B, then 3 refusals, "
        f"{data['period_ms']:g} ms period, {data['deadline_ms']:g} ms deadline)\n\n{table}\n\n"
        "Update cycles: every cycle from the update request to the end of its takeover cycle or refusal "
        "(load in a worker thread, shadow run of 50 OK cycles, takeover). Load: manifest and hashes, the "
        "structure walk and, for a model new to the process, one run in a child process (about 0.1 s; cached "
        "by the model's sha256 after that). Refusal reasons, first condition:\n\n"
        + "\n".join(f"- {why}" for why in data["conditions"][0]["refusal_reasons"])
    )


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels, x = ["p50", "p99", "max"], range(3)
    width = 0.8 / (2 * len(rows))
    for i, r in enumerate(rows):
        for j, (kind, key) in enumerate((("update", "update_cycles"), ("other", "other_cycles"))):
            vals = [r[key][k] or 0 for k in ("p50", "p99", "max")]
            ax.bar(
                [p + (2 * i + j) * width for p in x], vals, width, label=f"{r['condition']}, {kind} cycles"
            )
    ax.axhline(50, color="red", linestyle="--", linewidth=1, label="deadline")
    ax.set_xticks([p + 0.4 - width / 2 for p in x], labels)
    ax.set_ylabel("cycle latency (ms)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    ax.set_title("serve --watch: cycles during policy updates vs the others")
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    main()
