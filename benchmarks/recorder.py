"""The flight recorder's cost and the drift monitor's figures (benchmarks/results/recorder.{json,md,png}).

- **Cost**: serve's own service (plc_bridge.service.ServeService: the loop, its hooks, the recorder and the
  drift monitor) against plc-sim over OPC UA on loopback, at 10 and 20 ms periods, recording off and on in
  interleaved blocks (the machine is shared: a slow minute hits both). Per cycle latency p50/p99/max, deadline
  misses, and the trace's size per hour at 20 ms.
- **Drift**: the same DriftMonitor serve runs, fed the artifact's own closed loop in its env (no OPC UA: the
  monitor sees the observations serve would read), with one observation value offset by k training standard
  deviations from a given step on: the observations from the shift to the first alarm, per offset; and the
  alarms over a long unshifted run (false alarms), with the window and threshold serve uses by default.

    python benchmarks/recorder.py --artifact demo-out/artifacts/int8
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from benchmarks.loop_latency import plc_sim
from rl2edge.plc_bridge.client import BridgeConfig
from rl2edge.plc_bridge.drift import DriftMonitor, DriftReference
from rl2edge.plc_bridge.drift_config import DEFAULT_EVERY, DEFAULT_THRESHOLD, DEFAULT_WINDOW
from rl2edge.plc_bridge.hooks import CycleOutcome
from rl2edge.plc_bridge.loop import LoopConfig
from rl2edge.plc_bridge.metrics import HealthConfig
from rl2edge.plc_bridge.nodemap import default_node_map
from rl2edge.plc_bridge.policy_update import UpdateConfig
from rl2edge.plc_bridge.recorder import RecordConfig
from rl2edge.plc_bridge.service import ServeService, ServiceConfig
from rl2edge.runtime import Policy
from rl2edge.train.core.evaluation import evaluate
from testkit.plc import free_port

OFFSETS_STD = (0.5, 1.5, 3.0, 6.0)
"""Offsets of one observation value, in the drift reference's standard deviations of that value."""


class _Timed(ServeService):
    """serve's service, keeping each cycle's latency as well."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.latency_ms: list[float] = []

    def after_cycle(self, outcome: CycleOutcome) -> None:
        super().after_cycle(outcome)
        self.latency_ms.append(outcome.latency_ms)


def served_block(art: Path, url: str, period_ms: float, cycles: int, record: Path | None) -> dict[str, Any]:
    policy = Policy.load(art, isolate=True, call_timeout_s=1.0)
    bridge = BridgeConfig(endpoint=url, node_map=default_node_map())
    service = _Timed(
        policy,
        bridge,
        LoopConfig(period_ms=period_ms, max_cycles=cycles, stats_interval_s=3600),
        ServiceConfig(
            updates=UpdateConfig(artifact=art, load=Policy.load),
            health=HealthConfig(),
            record=RecordConfig(record) if record is not None else None,
        ),
    )
    try:
        summary = asyncio.run(service.run(asyncio.Event()))
    finally:
        service.close()
    return {
        "latency": np.asarray(service.latency_ms),
        "misses": summary["deadline_misses"],
        "summary": summary,
    }


def cost(art: Path, env_id: str, cycles: int, blocks: int, work: Path) -> dict[str, Any]:
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    out: dict[str, Any] = {}
    with plc_sim(env_id, url, [], work / "plc-sim.log"):
        for period in (10.0, 20.0):
            forms: dict[str, dict[str, Any]] = {k: {"lat": [], "misses": 0} for k in ("off", "on")}
            trace_bytes, traced = 0, 0
            for b in range(blocks):
                for form in ("off", "on"):
                    folder = work / f"trace-{period:g}-{b}" if form == "on" else None
                    got = served_block(art, url, period, cycles // blocks, folder)
                    forms[form]["lat"].append(got["latency"])
                    forms[form]["misses"] += got["misses"]
                    if folder is not None:
                        trace_bytes += sum(p.stat().st_size for p in folder.glob("*.jsonl"))
                        traced += got["summary"]["record"]["written"]
                        assert got["summary"]["record"]["dropped"] == 0, got["summary"]["record"]
                        shutil.rmtree(folder)
            row: dict[str, Any] = {}
            for form, f in forms.items():
                lat = np.concatenate(f["lat"])
                row[form] = {
                    "cycles": int(lat.size),
                    "p50": float(np.percentile(lat, 50)),
                    "p99": float(np.percentile(lat, 99)),
                    "max": float(lat.max()),
                    "deadline_misses": f["misses"],
                }
            row["p99_added_ms"] = row["on"]["p99"] - row["off"]["p99"]
            row["bytes_per_cycle"] = trace_bytes / max(traced, 1)
            row["mb_per_hour"] = row["bytes_per_cycle"] * 3600e3 / period / 1e6
            out[f"{period:g}"] = row
    return out


class _ShiftedSensor:
    """One observation value offset by `offset` from observation `shift_at` on: what the monitor and the
    policy both see (serve reads the same shifted value for both)."""

    def __init__(self, policy: Policy, monitor: DriftMonitor, dim: int, offset: float, shift_at: int):
        self.policy, self.monitor, self.dim, self.offset, self.shift_at = (
            policy,
            monitor,
            dim,
            offset,
            shift_at,
        )
        self.seen = 0

    def _read(self, obs: np.ndarray) -> np.ndarray:
        if self.seen > self.shift_at:
            obs = np.array(obs, copy=True)
            obs[self.dim] += self.offset
        return obs

    def observe(self, obs: np.ndarray) -> None:
        self.seen += 1
        self.monitor.observe(self._read(obs))

    def act(self, obs: np.ndarray) -> Any:
        return self.policy.predict(self._read(obs))


def drift(art: Path, env_id: str, episodes_clean: int) -> dict[str, Any]:
    """The monitor on the artifact's closed loop: unshifted for `episodes_clean` episodes, then per offset."""
    policy = Policy.load(art)
    ref = DriftReference.of(policy.manifest)
    std = 1.0 / ref.inv_std
    # the dimension with the most room: the first one (CartPole's cart position; any plant: a sensor)
    dim = 0
    clean = DriftMonitor(policy.manifest)
    evaluate(policy.predict, env_id, episodes_clean, 10_000, on_step=clean.observe)
    rows: list[dict[str, Any]] = []
    for k in OFFSETS_STD:
        plant = _ShiftedSensor(policy, DriftMonitor(policy.manifest), dim, k * std[dim], 2 * DEFAULT_WINDOW)
        start = 20_000
        while plant.monitor.first_alarm_at is None and plant.seen < plant.shift_at + 20 * DEFAULT_WINDOW:
            evaluate(plant.act, env_id, 5, start, on_step=plant.observe)
            start += 5
        first = plant.monitor.first_alarm_at
        rows.append(
            {
                "offset_std": k,
                "dimension": ref.names[dim],
                "false_alarm_before_shift": first is not None and first <= plant.shift_at,
                "observations_to_detect": None if first is None else first - plant.shift_at,
            }
        )
    scored = max(0, (clean._n - DEFAULT_WINDOW) // DEFAULT_EVERY + 1)
    return {
        "window": DEFAULT_WINDOW,
        "every": DEFAULT_EVERY,
        "threshold": DEFAULT_THRESHOLD,
        "basis": ref.basis,
        "unshifted": {
            "observations": clean._n,
            "windows_scored": scored,
            "false_alarms": clean.alarms,
            "largest_score": clean.score,
        },
        "shifted": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", type=Path, default=Path("demo-out/artifacts/int8"))
    ap.add_argument("--cycles", type=int, default=3000, help="cycles per period and form (default: 3000)")
    ap.add_argument("--blocks", type=int, default=6, help="interleaved blocks (default: 6)")
    ap.add_argument("--clean-episodes", type=int, default=200, help="unshifted episodes (default: 200)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    env_id = Policy.load(args.artifact).manifest.data["source"]["env_id"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl2edge-recorder-") as work:
        costs = cost(args.artifact, env_id, args.cycles, args.blocks, Path(work))
    detect = drift(args.artifact, env_id, args.clean_episodes)
    data = {
        "artifact": str(args.artifact),
        "env_id": env_id,
        "cost": costs,
        "drift": detect,
        "wall_s": time.perf_counter() - t0,
    }
    lines = [
        "# Flight recorder and drift monitor",
        "",
        f"Artifact `{args.artifact}` ({env_id}); serve's service against plc-sim over OPC UA on loopback, "
        f"recording off and on in {args.blocks} interleaved blocks; `python benchmarks/recorder.py`.",
        "",
        markdown_table(
            [
                "period ms",
                "recording",
                "cycles",
                "p50 ms",
                "p99 ms",
                "max ms",
                "misses",
                "p99 added ms",
                "MB/hour",
            ],
            [
                [
                    p,
                    form,
                    r[form]["cycles"],
                    f"{r[form]['p50']:.3f}",
                    f"{r[form]['p99']:.3f}",
                    f"{r[form]['max']:.2f}",
                    r[form]["deadline_misses"],
                    f"{r['p99_added_ms']:+.3f}" if form == "on" else "",
                    f"{r['mb_per_hour']:.1f}" if form == "on" else "",
                ]
                for p, r in costs.items()
                for form in ("off", "on")
            ],
        ),
        "",
        f"Drift: window {detect['window']} observations, scored every {detect['every']}, threshold "
        f"{detect['threshold']:g} standard deviations of the {detect['basis']} data. Unshifted: "
        f"{detect['unshifted']['false_alarms']} alarms in {detect['unshifted']['windows_scored']} windows "
        f"({detect['unshifted']['observations']} observations; largest score "
        f"{detect['unshifted']['largest_score'] if detect['unshifted']['largest_score'] is None else round(detect['unshifted']['largest_score'], 3)}).",
        "",
        "A sensor offset on a value the policy itself controls is partly hidden by the policy's correction (it "
        "steers the observed value back), so small offsets of such a value take long or go unseen; "
        "'not detected' means not within 20 windows after the shift.",
        "",
        markdown_table(
            ["offset (reference std)", "dimension", "observations to detect", "false alarm before the shift"],
            [
                [
                    r["offset_std"],
                    r["dimension"],
                    r["observations_to_detect"] or "not detected",
                    "yes" if r["false_alarm_before_shift"] else "no",
                ]
                for r in detect["shifted"]
            ],
        ),
    ]
    write_results("recorder", data, "\n".join(lines), args.out)
    plt = pyplot()
    if plt is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
        periods = list(costs)
        x = np.arange(len(periods))
        for i, form in enumerate(("off", "on")):
            axes[0].bar(
                x + 0.35 * i, [costs[p][form]["p99"] for p in periods], 0.35, label=f"recording {form}"
            )
        axes[0].set_xticks(x + 0.175, [f"{p} ms" for p in periods])
        axes[0].set_ylabel("p99 cycle latency (ms)")
        axes[0].legend()
        det = [r for r in detect["shifted"] if r["observations_to_detect"] is not None]
        axes[1].plot([r["offset_std"] for r in det], [r["observations_to_detect"] for r in det], "o-")
        axes[1].set_xlabel("offset (training standard deviations)")
        axes[1].set_ylabel("observations to detect")
        save_figure(fig, args.out / "recorder.png")
    print("\n".join(lines))
    return data


if __name__ == "__main__":
    main()
