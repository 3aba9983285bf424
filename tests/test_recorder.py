"""serve's flight recorder, the trace, drift and replay, with real serve, plc-sim and OPC UA on loopback:
recording changes no served action, a SIGKILL leaves a readable trace, a full disk stops the recording and
not the loop, a shifted sensor is reported as drift and an unshifted one is not, and a candidate replayed on
the trace agrees as it should."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl2edge.plc_bridge.drift_config import DriftConfig
from rl2edge.plc_bridge.metrics import parse_metrics
from rl2edge.plc_bridge.recorder import FlightRecorder, RecordConfig
from rl2edge.runtime.trace import read_trace
from testkit.cli import EXE
from testkit.cli import rl2edge as _rl2edge
from testkit.drifting_plants import ShiftedCartPole
from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server

ROOT = Path(__file__).resolve().parents[1]
SIM_ENV = {"PYTHONPATH": str(ROOT)}  # plc-sim's own process imports testkit's and examples' plants

# The header of a two-value Box plant with a Discrete(2) action, for the recorder's own tests.
HEADER = {"observation": {"type": "box", "shape": [2], "dtype": "float32", "low": [-1, -1], "high": [1, 1]},
          "action": {"type": "discrete", "n": 2, "start": 0}}  # fmt: skip


def closed_loop(
    tmp_path: Path,
    art: Path,
    name: str,
    serve_args: list[str],
    env: str = "CartPole-v1",
    episodes: int = 3,
    sim_args: tuple[str, ...] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """plc-sim (lockstep) and serve, to the end of `episodes`: (serve's summary, plc-sim's per-step trace)."""
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    summary, sim_trace = tmp_path / f"{name}-serve.json", tmp_path / f"{name}-sim.jsonl"
    sim_cmd = ["plc-sim", "--env", env, "--endpoint", url, "--mode", "lockstep", "--seed", "3"]
    sim_cmd += ["--episodes", str(episodes), "--trace", str(sim_trace), *sim_args]
    with running(sim_cmd, tmp_path / f"{name}-sim.log", SIM_ENV) as sim:
        wait_for_server(url)
        cmd = ["serve", str(art), "--endpoint", url, "--period-ms", "5", *NO_MISS, "--summary", str(summary)]
        with running([*cmd, *serve_args], tmp_path / f"{name}-serve.log") as serve:
            assert sim.wait(timeout=180) == 0, (tmp_path / f"{name}-sim.log").read_text()
            assert stop(serve) == 0, (tmp_path / f"{name}-serve.log").read_text()
    steps = [json.loads(line) for line in sim_trace.read_text().splitlines()]
    return json.loads(summary.read_text()), steps


def test_recording_changes_nothing_served_and_replay_gates_a_candidate(
    cartpole_all, cartpole_flipped, tmp_path: Path
) -> None:
    art = cartpole_all[1] / "fp32"
    trace_dir = tmp_path / "trace"
    with_rec, applied = closed_loop(tmp_path, art, "on", ["--record", str(trace_dir)])
    without, applied_off = closed_loop(tmp_path, art, "off", [])
    # the same plant steps, the same actions, with and without the recorder
    assert [s["action"] for s in applied] == [s["action"] for s in applied_off]
    assert with_rec["record"]["dropped"] == 0 and with_rec["record"]["stopped"] == ""
    assert with_rec["record"]["written"] == with_rec["record"]["records"] == with_rec["cycles"]
    assert "record" not in without

    trace = read_trace(trace_dir)
    assert trace.torn == 0 and len(trace.records) == with_rec["cycles"]
    # what the recorder says was written is what the PLC applied, plant step by plant step
    served = {r["seq"]: r["action"] for r in trace.records if r["status"] == "OK"}
    assert [served[s["seq"]] for s in applied] == [s["action"] for s in applied]
    assert sum(r["episode_start"] for r in trace.records if r["predicted"]) >= 3

    rc, out, err = rl2edge("trace", "show", str(trace_dir), "--json")
    assert rc == 0, err
    shown = json.loads(out)
    assert shown["cycles"] == with_rec["cycles"] and shown["statuses"]["OK"] == with_rec["ok"]
    assert list(shown["policies"]) == [trace.header["policy"]["manifest_sha256"][:16]]
    assert shown["drift"]["score"] is not None and set(shown["drift"]["per_key"]) == {"obs"}

    # the serving artifact on its own trace: the same file, the same interpreter, 100 %
    rc, out, err = rl2edge("replay", str(art), "--trace", str(trace_dir), "--min-agreement", "1", "--json")
    assert rc == 0, err
    same = json.loads(out)
    assert same["agreement"] == 1.0 and same["passed"] and same["compared"] == with_rec["ok"]
    # its int8 sibling: agreement measured, whatever it is; the flipped policy disagrees and is stopped
    rc, out, _ = rl2edge("replay", str(cartpole_all[1] / "int8"), "--trace", str(trace_dir), "--json")
    int8 = json.loads(out)
    assert rc == (0 if int8["agreement"] >= 0.9 else 1) and 0.5 < int8["agreement"] <= 1.0
    rc, out, _ = rl2edge("replay", str(cartpole_flipped), "--trace", str(trace_dir))
    assert rc == 1 and "FAILED: agreement >= 0.9" in out
    assert rl2edge("replay", str(cartpole_flipped), "--trace", str(trace_dir), "--min-agreement", "0")[0] == 0

    rc, _, err = rl2edge("trace", "plot", str(trace_dir), "--out", str(tmp_path / "report.html"))
    assert rc == 0, err
    page = (tmp_path / "report.html").read_text()
    assert (
        'id="summary"' in page
        and "data:image/png;base64," in page
        and f"<td>{with_rec['cycles']}</td>" in page
    )

    rc, _, _ = rl2edge("trace", "export", str(trace_dir), "--csv", str(tmp_path / "t.csv"))
    assert rc == 0
    import pandas as pd

    table = pd.read_csv(tmp_path / "t.csv")
    assert len(table) == len(trace.records) and {"obs.obs.0", "obs.obs.3", "action.0", "status"} <= set(table)
    rc, _, _ = rl2edge("trace", "export", str(trace_dir), "--parquet", str(tmp_path / "t.parquet"))
    assert rc == 0 and len(pd.read_parquet(tmp_path / "t.parquet")) == len(trace.records)


def test_a_serve_killed_mid_run_leaves_a_trace_that_reads_and_replays(cartpole_all, tmp_path: Path) -> None:
    art = cartpole_all[1] / "fp32"
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    trace_dir = tmp_path / "trace"
    port = free_port()
    sim = ["plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "lockstep"]
    with running(sim, tmp_path / "sim.log"):
        wait_for_server(url)
        serve = subprocess.Popen(
            [
                EXE,
                "serve",
                str(art),
                "--endpoint",
                url,
                "--period-ms",
                "5",
                *NO_MISS,
                "--record",
                str(trace_dir),
                "--metrics-port",
                str(port),
            ],
            stdout=(tmp_path / "serve.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            # past the writer's first flush (0.5 s) with some hundreds of cycles behind it
            _until(lambda: _lines(trace_dir) > 200, 60)
            page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            written = parse_metrics(page)[("rl2edge_record_written_total", ())]
            assert written > 0 and parse_metrics(page)[("rl2edge_record_stopped", ())] == 0
        finally:
            serve.send_signal(signal.SIGKILL)
            serve.wait(timeout=20)
    # a crash mid-line: the torn tail is skipped and counted, never read as a record
    seg = sorted(trace_dir.glob("segment-*.jsonl"))[-1]
    with seg.open("a") as f:
        f.write('{"t": 1.0, "cycle": 99999, "obs": [0.1, 0.')
    trace = read_trace(trace_dir)
    assert trace.torn == 1 and len(trace.records) > 200
    assert [r["cycle"] for r in trace.records] == list(range(1, len(trace.records) + 1))
    rc, out, err = rl2edge("trace", "show", str(trace_dir))
    assert rc == 0 and "torn lines skipped" in out, err
    assert rl2edge("replay", str(art), "--trace", str(trace_dir), "--min-agreement", "1")[0] == 0


def test_a_full_disk_stops_the_recording_and_never_the_loop(cartpole_all, tmp_path: Path) -> None:
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a 96 kB tmpfs cannot be mounted here (root needed): {mounted.stderr.decode().strip()}")
    try:
        summary, applied = closed_loop(
            tmp_path, cartpole_all[1] / "fp32", "full", ["--record", str(disk / "trace")], episodes=4
        )
        rec = summary["record"]
        assert "No space left on device" in rec["stopped"], rec
        assert rec["written"] > 0 and rec["dropped"] > 0 and rec["written"] + rec["dropped"] == rec["records"]
        assert summary["cycles"] == rec["records"] and summary["ok"] == summary["cycles"]
        assert len(applied) >= 4 and summary["deadline_misses"] == 0
        assert "recording stopped" in (tmp_path / "full-serve.log").read_text()
        assert len(read_trace(disk / "trace").records) > 0  # what was written before still reads
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.integration  # two closed loops of 30 episodes: the integration tier keeps make test under 10 minutes
def test_a_shifted_sensor_is_reported_as_drift_and_an_unshifted_one_is_not(
    cartpole_all, tmp_path: Path
) -> None:
    """The cart-position sensor reads 1.5 m off from plant step 1500, some two standard deviations of the
    policy's own calibration data: with serve's default window (1000 observations, scored every 50) every
    window after the shift has moved by more than the threshold, so the alarm comes within one window and
    one scoring interval of the first shifted observation (DRIFT_CYCLES), and none before it."""
    art = cartpole_all[1] / "fp32"
    shifted, _ = closed_loop(
        tmp_path,
        art,
        "shifted",
        ["--record", str(tmp_path / "trace")],
        env="testkit.drifting_plants:ShiftedCartPole",
        episodes=30,
    )
    records = read_trace(tmp_path / "trace").records
    shift_at = next(i for i, r in enumerate(records) if r["seq"] > ShiftedCartPole.SHIFT_AFTER)
    assert records[shift_at]["obs"][0] - records[shift_at - 1]["obs"][0] > 1.0  # the offset arrived there
    first = shifted["drift"]["first_alarm_at"]
    assert first is not None and shift_at < first <= shift_at + DRIFT_CYCLES, (shift_at, shifted["drift"])
    assert "obs[0]" in shifted["drift"]["largest"] and shifted["drift"]["score"] > 1.0
    assert "observation drift" in (tmp_path / "shifted-serve.log").read_text()

    plain, _ = closed_loop(
        tmp_path, art, "plain", [], env="testkit.drifting_plants:UnshiftedCartPole", episodes=30
    )
    assert plain["drift"]["alarms"] == 0 and plain["drift"]["observations"] > 3000, plain["drift"]


DRIFT_CYCLES = DriftConfig().window + DriftConfig().every


@pytest.mark.integration  # two AGV closed loops and a retrained policy: the integration tier
def test_the_agv_is_recorded_its_drift_reported_plotted_and_a_retrained_policy_replayed(
    agv_dict_fp32, tmp_path: Path
) -> None:
    """The AGV example (lidar, imu, goal, speed) recorded by serve; its speed sensor reading 0.5 m/s fast shows
    as the speed key's drift against the same plant unshifted (per key over the trace: `trace show`). No alarm
    timing is asserted here: the goal's values are constant through an episode, so a window of a few of
    this briefly trained policy's short episodes holds few independent goals, and a 300-observation window
    alarmed on the unshifted plant (score 2.8 on its first window). `trace plot` draws the page; a
    retrained artifact (another seed) is replayed on the unshifted trace, and a gate tighter than the
    difference it measures refuses it.
    """
    from testkit.runs import AGV_RUN, export_run, tiny_train

    art = agv_dict_fp32[1]
    runs: dict[str, dict[str, Any]] = {}
    drift: dict[str, dict[str, float]] = {}
    for env, name in (
        ("testkit.drifting_plants:UnshiftedAgv", "plain"),
        ("testkit.drifting_plants:ShiftedAgv", "shifted"),
    ):
        runs[name], _ = closed_loop(
            tmp_path, art, name, ["--record", str(tmp_path / name)], env=env, episodes=3
        )
        rc, out, err = rl2edge("trace", "show", str(tmp_path / name), "--json")
        assert rc == 0, err
        drift[name] = json.loads(out)["drift"]["per_key"]
    assert drift["shifted"]["speed"] - drift["plain"]["speed"] > 0.3, drift
    for key in ("lidar", "imu", "goal"):  # the other sensors are not what moved
        assert (
            drift["shifted"]["speed"] - drift["shifted"][key] > drift["plain"]["speed"] - drift["plain"][key]
        )
    trace = read_trace(tmp_path / "shifted")
    assert [k for k, _ in trace.observation_keys] == ["lidar", "imu", "goal", "speed"]
    assert len(trace.records[0]["obs"]) == 30

    rc, _, err = rl2edge("trace", "plot", str(tmp_path / "shifted"), "--out", str(tmp_path / "agv.html"))
    assert rc == 0, err
    page = (tmp_path / "agv.html").read_text()
    assert all(k in page for k in ("lidar", "imu", "goal", "speed")) and "drift" in page

    rc, out, err = rl2edge(
        "replay", str(art), "--trace", str(tmp_path / "plain"), "--max-diff", "0", "--json"
    )
    assert rc == 0, err
    same = json.loads(out)
    assert same["kind"] == "box" and max(same["max_abs_diff"]) == 0.0 and same["compared"] > 50
    retrained = tmp_path / "retrained"
    export_run(tiny_train(out=tmp_path / "retrained-run", seed=1, **AGV_RUN), retrained, "fp32")
    plain = str(tmp_path / "plain")
    rc, out, err = rl2edge("replay", str(retrained), "--trace", plain, "--max-diff", "1", "--json")
    assert rc == 0, err
    other = json.loads(out)  # what the closing note states: its agreement with what was served
    assert other["compared"] == same["compared"] and other["mean_diff_share_of_range"] > 0.0, other
    # a gate tighter than what it measured refuses the roll-out: exit 1
    gate = f"{other['mean_diff_share_of_range'] / 2:g}"
    rc, out, _ = rl2edge("replay", str(retrained), "--trace", plain, "--max-diff", gate, "--json")
    assert rc == 1 and json.loads(out)["passed"] is False


def test_segments_rotate_and_the_oldest_go_past_the_bound(tmp_path: Path) -> None:
    rec = FlightRecorder(RecordConfig(tmp_path / "t", max_mb=2.0, segment_mb=0.2), HEADER)
    obs = np.linspace(-1, 1, 2)
    for i in range(40_000):
        rec.record(time.time(), i + 1, i, False, obs, [1.0], "OK", 0, 1.0, "abc", True, False)
        while i % 1000 == 0 and rec._queue.qsize() > 100:  # let the writer keep up: nothing dropped here
            time.sleep(0.01)
    rec.close()
    assert rec.stats()["dropped"] == 0 and rec.stats()["written"] == 40_000
    segments = sorted((tmp_path / "t").glob("segment-*.jsonl"))
    total = sum(p.stat().st_size for p in segments)
    assert rec.segments_removed > 0 and total <= 2.0e6 and segments[0].name != "segment-000001.jsonl"
    cycles = np.asarray([r["cycle"] for r in read_trace(tmp_path / "t").records])
    # contiguous up to the last record: only the oldest segments went
    assert cycles[-1] == 40_000 and np.all(np.diff(cycles) == 1) and cycles[0] > 1


def test_a_writer_that_falls_behind_drops_and_counts_never_blocks(tmp_path: Path) -> None:
    rec = FlightRecorder(RecordConfig(tmp_path / "t", queue_size=10), HEADER)
    rec._write = lambda f: time.sleep(0.05)  # type: ignore[method-assign]  # a disk that stalls
    t0 = time.perf_counter()
    for i in range(200):
        rec.record(time.time(), i + 1, i, False, [0.0, 0.0], [1.0], "OK", 0, 1.0, "abc", True, False)
    assert time.perf_counter() - t0 < 0.5  # 200 calls never waited on the writer
    assert rec.dropped >= 150
    rec.close()


def test_bad_trace_input_is_one_line(tmp_path: Path) -> None:
    rc, _, err = rl2edge("trace", "show", str(tmp_path))
    assert rc == 2 and "no segment-*.jsonl segment" in err
    (tmp_path / "segment-000001.jsonl").write_text('{"kind": "header", "format": "other/9"}\n')
    rc, _, err = rl2edge("trace", "show", str(tmp_path))
    assert rc == 2 and "this rl2edge reads 'rl2edge-trace/1'" in err
    rc, _, err = rl2edge(
        "serve",
        "x",
        "--endpoint",
        "opc.tcp://127.0.0.1:1",
        "--record",
        str(tmp_path / "segment-000001.jsonl"),
    )
    assert rc == 2 and "is not a folder" in err


def test_the_report_page_shows_its_plot_in_a_browser(tmp_path: Path) -> None:
    """The page as a person sees it: headless Chromium (Debian's package; .ci/run installs it) renders it to a
    PNG that must show the plot: the image decoded at its size, not a blank page or a broken-image icon."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    header = {**HEADER, "folded": {"normalization": {"enabled": True, "mean": [0, 0], "inv_std": [2, 2]}}}
    rec = FlightRecorder(RecordConfig(tmp_path / "t"), header)
    for i in range(1500):  # a sine plant that shifts half way
        obs = [np.sin(i / 40), 0.5 * np.cos(i / 40) + (1.0 if i > 750 else 0.0)]
        rec.record(time.time(), i + 1, i, i % 300 == 0, obs, [float(i % 2)], "OK" if i % 97 else "STALE", 0, 1.0,
                   "abc", True, False)  # fmt: skip
    rec.close()
    assert rl2edge("trace", "plot", str(tmp_path / "t"), "--out", str(tmp_path / "r.html"))[0] == 0
    page, shot = tmp_path / "r.html", tmp_path / "shot.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=1100,1400",
         page.resolve().as_uri()],
        capture_output=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), float)
    # matplotlib's default colours (tab:blue 31,119,180 and tab:orange) drawn: the plot rendered, in colour
    blue = np.all(np.abs(pixels - [31, 119, 180]) < 40, axis=2).sum()
    assert blue > 2000, f"{blue} plot-blue pixels: the plot did not render"


def rl2edge(*args: str) -> tuple[int, str, str]:
    done = _rl2edge(*args, cwd=ROOT)
    return done.returncode, done.stdout, done.stderr


def _until(predicate: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _lines(folder: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in folder.glob("segment-*.jsonl"))
