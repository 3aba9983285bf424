"""A policy roll-out through Mender on one device: the time from `mender install FILE` to the new policy
answering the PLC, and to the commit.

The real Mender client (standalone mode) installs rl2edge-policy artifacts into a running
`rl2edge serve --watch` (serve's documented defaults: a 1 s watch interval, a 50-cycle shadow run at a
20 ms period) that answers plc-sim (lockstep CartPole) on loopback. Each update is a new policy (a shadow
run before it takes over); the last points back at the first, which served in this run (known-good: no
shadow run). "answering" is serve's own record of the takeover (`policy.history[].time`).

    python benchmarks/fleet.py --first ART_FP32 --updates ART_INT8,ART_FP16,ART_DYNAMIC

Needs the Debian packages mender-client and mender-artifact, and root (the client's module folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from testkit import mender as mk
from testkit.plc import NO_MISS, running, stop, wait_for_server


def run(first: Path, updates: list[Path], work: Path, watch_s: float, shadow: int) -> dict[str, Any]:
    dev = mk.device(work / "device", commit_timeout=120, watch_interval=watch_s, shadow_cycles=shadow)
    files = [mk.package(first, work / "first.mender", "--first", "--name", "first")]
    for step in (("install", str(files[0])), ("commit",)):
        assert dev.mender(*step).returncode == 0
    plan = [(f"u{i}-{p.name}", p) for i, p in enumerate(updates, 1)] + [("back-to-first", first)]
    packaged = {name: mk.package(art, work / f"{name}.mender", "--name", name) for name, art in plan}
    rows: list[dict[str, Any]] = []
    sim = ["plc-sim", "--env", "CartPole-v1", "--endpoint", dev.url, "--mode", "lockstep"]
    with running(sim, work / "sim.log") as sim_proc:
        wait_for_server(dev.url)
        with running(dev.serve_args(*NO_MISS), work / "serve.log") as serve:
            mk.wait_until("serve ready", lambda: mk.ready(dev), 60)
            time.sleep(1.0)
            for name, _ in plan:
                t0_wall, t0 = time.time(), time.perf_counter()
                installed = dev.mender("install", str(packaged[name]))
                t_install = time.perf_counter() - t0
                committed = dev.mender("commit")
                t_commit = time.perf_counter() - t0
                if installed.returncode or committed.returncode:
                    raise RuntimeError(f"{name}: {installed.stderr[-300:]} {committed.stderr[-300:]}")
                rows.append({"update": name, "install_s": t_install, "committed_s": t_commit, "t0": t0_wall})
                time.sleep(1.0)
            assert stop(serve) == 0
        assert stop(sim_proc) == 0
    summary = json.loads((dev.root / "summary.json").read_text())
    history = [h for h in summary["policy"]["history"] if h["result"] == "accepted"]
    assert len(history) == len(rows), history
    for row, h in zip(rows, history, strict=True):
        row["answering_s"] = h["time"] - row.pop("t0")
        row["known_good"] = bool(h["rollback"])
        row["shadow_cycles"] = (h.get("shadow") or {}).get("cycles", 0)
    counts = {
        k: summary[k] for k in ("cycles", "ok", "invalid", "stale", "deadline_misses", "inference_errors")
    }
    return {"updates": rows, "serve": counts}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", required=True, help="the device's first policy (a CartPole-v1 artifact)")
    ap.add_argument("--updates", required=True, help="artifacts of the same layout, comma-separated")
    ap.add_argument("--watch-interval", type=float, default=1.0, help="serve's (default: 1, its default)")
    ap.add_argument("--shadow-cycles", type=int, default=50, help="serve's (default: 50, its default)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    if why := mk.missing():
        raise SystemExit(f"fleet benchmark: {why}")
    updates = [Path(p) for p in args.updates.split(",") if p]
    with tempfile.TemporaryDirectory() as tmp:
        data = run(Path(args.first), updates, Path(tmp), args.watch_interval, args.shadow_cycles)
    data.update(period_ms=20.0, watch_interval_s=args.watch_interval, shadow_cycles=args.shadow_cycles)
    md = _markdown(data)
    out = Path(args.out)
    write_results("fleet", data, md, out)
    _plot(data["updates"], out / "fleet.png")
    print(md)
    return data


def _markdown(data: dict[str, Any]) -> str:
    rows = [
        [
            u["update"],
            "known-good (no shadow run)"
            if u["known_good"]
            else f"new ({u['shadow_cycles']}-cycle shadow run)",
            f"{u['install_s']:.2f}",
            f"{u['answering_s']:.2f}",
            f"{u['committed_s']:.2f}",
        ]
        for u in data["updates"]
    ]
    s = data["serve"]
    return "\n".join(
        [
            "# A policy roll-out through Mender (standalone client) to a running serve",
            "",
            f"serve at a {data['period_ms']:g} ms period, watch interval {data['watch_interval_s']:g} s, "
            f"{data['shadow_cycles']}-cycle shadow run, answering plc-sim (CartPole, lockstep) on loopback. "
            "Seconds from `mender install` starting: its end, serve's takeover (the new policy answers the "
            "PLC from that cycle on, serve's own record) and the end of `mender commit` (the update module "
            "saw the new manifest in serve's metrics and /readyz 200).",
            "",
            markdown_table(
                ["update", "kind", "install done (s)", "answering the PLC (s)", "committed (s)"], rows
            ),
            "",
            f"serve over the whole run: {s['cycles']} cycles, {s['ok']} OK, {s['invalid']} invalid, "
            f"{s['stale']} stale, {s['inference_errors']} inference errors, {s['deadline_misses']} deadline "
            "misses (50 ms budget): no cycle without a valid action.",
            "",
            "Made by `benchmarks/fleet.py` on the machine in fleet.json.",
        ]
    )


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3))
    names = [r["update"] for r in rows]
    for key, label in (
        ("install_s", "install done"),
        ("answering_s", "answering the PLC"),
        ("committed_s", "committed"),
    ):
        ax.plot(names, [r[key] for r in rows], marker="o", label=label)
    ax.set_ylabel("s from `mender install`")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    main()
