"""serve as a plant service, each part against real processes on loopback: the metrics endpoint against
the summary, health against a PLC killed and restarted, policy updates (taken over from a known cycle,
as the PLC's own trace shows; refused when they do not check out), the config file against the flags,
systemd's notification socket."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl2edge.plc_bridge.metrics import parse_metrics
from rl2edge.runtime import Policy
from testkit.cli import EXE, assert_clean_failure, rl2edge
from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server


def http(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def wait_for(what: str, check: Callable[[], Any], within_s: float = 30.0) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not happen within {within_s} s")


def metrics(port: int) -> dict[Any, float]:
    code, text = http(f"http://127.0.0.1:{port}/metrics")
    assert code == 200, text
    return parse_metrics(text)


def sim_args(url: str, *extra: str) -> list[str]:
    return ["plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "lockstep", *extra]


COUNTERS = {  # summary key -> metric sample
    "ok": ("rl2edge_cycles_total", (("status", "ok"),)),
    "invalid": ("rl2edge_cycles_total", (("status", "invalid_observation"),)),
    "stale": ("rl2edge_cycles_total", (("status", "stale"),)),
    "deadline_misses": ("rl2edge_deadline_misses_total", ()),
    "inference_errors": ("rl2edge_cycles_total", (("status", "inference_error"),)),
    "write_rejected": ("rl2edge_write_rejected_total", ()),
    "held": ("rl2edge_held_total", ()),
    "ramped": ("rl2edge_ramped_total", ()),
    "reconnects": ("rl2edge_reconnects_total", ()),
    "connection_losses": ("rl2edge_connection_losses_total", ()),
    "skipped_slots": ("rl2edge_skipped_slots_total", ()),
    "bad_quality": ("rl2edge_bad_quality_total", ()),
    "state_resets": ("rl2edge_state_resets_total", ()),
}


def test_metrics_match_the_summary_and_health_follows_the_plc(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    url, port = f"opc.tcp://127.0.0.1:{free_port()}", free_port()
    summary = tmp_path / "serve.json"
    base = f"http://127.0.0.1:{port}"
    serve_args = [
        "serve",
        str(root / "fp32"),
        "--endpoint",
        url,
        "--period-ms",
        "10",
        "--summary",
        str(summary),
    ]
    serve_args += ["--metrics-port", str(port), "--stats-interval", "0.5"]
    with running(serve_args, tmp_path / "serve.log") as serve:
        for i in (1, 2):  # the PLC comes, serves a while and is killed, twice
            with running(sim_args(url), tmp_path / f"sim{i}.log") as sim:
                wait_for_server(url)
                wait_for("ready", lambda: http(base + "/readyz")[0] == 200)
                wait_for("100 OK cycles", lambda i=i: metrics(port)[COUNTERS["ok"]] >= 100 * i)
                if i == 1:
                    shown = rl2edge("status", "--metrics-url", base + "/metrics")
                    assert shown.returncode == 0, shown.stderr
                    assert (
                        "connected, the last cycle was OK" in shown.stdout and "CartPole-v1" in shown.stdout
                    )
                    assert json.loads(summary.read_text())["cycles"] > 0  # rewritten while serving
                sim.send_signal(signal.SIGKILL)
                sim.wait(timeout=10)
            _, why = wait_for("unready", lambda: (r := http(base + "/readyz"))[0] == 503 and r)
            assert "not connected" in why
            assert http(base + "/healthz")[0] == 200  # alive: reconnecting is the loop's job
        frozen = metrics(port)  # no PLC, no cycles: the counters stand still until serve stops
        assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
    s = json.loads(summary.read_text())
    for key, sample in COUNTERS.items():
        assert frozen[sample] == s[key], key
    statuses = [v for (name, _), v in frozen.items() if name == "rl2edge_cycles_total"]
    assert len(statuses) == 6 and sum(statuses) == s["cycles"] >= 200
    assert s["reconnects"] == 1 and s["connection_losses"] == 2
    assert 0 < frozen[("rl2edge_disconnected_seconds_total", ())] <= s["disconnected_s"]
    # A cycle whose deadline passed while it waited on a hung PLC is counted but has no latency sample.
    assert (
        s["cycles"] - s["deadline_misses"]
        <= frozen[("rl2edge_cycle_latency_seconds_count", ())]
        <= s["cycles"]
    )
    assert frozen[("rl2edge_connected", ())] == 0 and frozen[("rl2edge_ready", ())] == 0
    assert frozen[("process_resident_memory_bytes", ())] > 10e6
    manifest = json.loads((root / "fp32" / "manifest.json").read_text())
    info = next(dict(labels) for (name, labels) in frozen if name == "rl2edge_artifact_info")
    assert info["sha256"] == manifest["files"]["policy.tflite"] and info["mode"] == "fp32"
    assert_clean_failure(rl2edge("status", "--metrics-url", base + "/metrics"), "no answer from")


def _trace(path: Path) -> list[dict[str, Any]]:
    """plc-sim's trace without the time of each step (which two runs never share)."""
    return [{k: v for k, v in json.loads(line).items() if k != "t"} for line in path.read_text().splitlines()]


def _served_trace(path: Path) -> list[dict[str, Any]]:
    """The plant's steps on the answers of a serving policy: all but the last row, which may be the plant
    stepping on SHUTDOWN's safe action. serve, stopping, writes it over an answer the lockstep plant had
    not applied yet (a stopped service leaves the safe action); CI saw it in both update tests."""
    return _trace(path)[:-1]


def _served_by(trace: list[dict[str, Any]], policy: Policy) -> np.ndarray:
    """For each plant step: did the applied action equal `policy`'s on that step's observation."""
    return np.array(
        [float(policy.predict(np.asarray(r["obs"], np.float32))) == r["action"][0] for r in trace]
    )


def _update_run(
    tmp_path: Path, first: Path, steps: list[tuple[Path, str, int]], *options: str
) -> dict[str, Any]:
    """serve `current` -> `first` with --watch; for each (target, outcome, count): point `current` at the
    target and wait for the update counter of that outcome to reach count. The summary."""
    url, port = f"opc.tcp://127.0.0.1:{free_port()}", free_port()
    current, summary = tmp_path / "current", tmp_path / "serve.json"
    current.symlink_to(first)
    serve_args = [
        "serve",
        str(current),
        "--endpoint",
        url,
        "--period-ms",
        "20",
        *NO_MISS,
        "--summary",
        str(summary),
    ]
    serve_args += ["--metrics-port", str(port), "--watch", "--watch-interval", "0.2", "--shadow-cycles", "20"]
    with running(sim_args(url, "--trace", str(tmp_path / "trace.jsonl")), tmp_path / "sim.log") as sim:
        wait_for_server(url)
        with running([*serve_args, *options], tmp_path / "serve.log") as serve:
            wait_for("ready", lambda: http(f"http://127.0.0.1:{port}/readyz")[0] == 200)
            for target, outcome, count in steps:
                nxt = tmp_path / "current.next"
                nxt.symlink_to(target)
                os.replace(nxt, current)  # the deployer's atomic swap
                key = ("rl2edge_policy_updates_total", (("result", outcome),))
                wait_for(
                    f"{outcome} #{count} ({target})", lambda key=key, count=count: metrics(port)[key] >= count
                )
                time.sleep(0.3)  # some cycles after
            peak_rss_kb = _peak_rss_kb(serve.pid)
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
        assert stop(sim) == 0
    return {**json.loads(summary.read_text()), "test_peak_rss_kb": peak_rss_kb}


def _peak_rss_kb(pid: int) -> int:
    """The process's peak resident memory (Linux /proc: VmHWM)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def test_an_update_serves_from_a_known_cycle_on_and_rolls_back(
    cartpole_all, cartpole_flipped, tmp_path: Path
) -> None:
    """A -> B -> A, with the shadow gate open (B, the flipped policy, disagrees everywhere): the PLC's
    trace shows A's actions before B's first answered sequence number, B's from it, A's after the rollback
    (which takes over without a shadow run: A served before)."""
    _, root = cartpole_all
    a, b = root / "fp32", cartpole_flipped
    s = _update_run(tmp_path, a, [(b, "accepted", 1), (a, "accepted", 2)], "--shadow-min-agreement", "0")
    updates = s["policy"]["history"]
    assert [u["result"] for u in updates] == ["accepted", "accepted"]
    assert updates[0]["shadow"]["agreement"] < 0.1 and not updates[0]["rollback"]
    assert updates[1]["rollback"] and updates[1]["shadow"] is None  # A served before: known-good
    k1, k2 = updates[0]["first_sequence"], updates[1]["first_sequence"]
    assert isinstance(k1, int) and isinstance(k2, int) and k1 < k2
    trace = _served_trace(tmp_path / "trace.jsonl")
    seq = np.array([r["seq"] for r in trace])
    by_a, by_b = _served_by(trace, Policy.load(a)), _served_by(trace, Policy.load(b))
    # The takeover cycle's sequence number may have been answered once already (a cycle that re-read it
    # before the plant stepped): either policy's action can be the one the plant applied there.
    assert by_a[seq < k1].all() and (seq < k1).sum() > 20
    assert by_b[(seq > k1) & (seq < k2)].all() and ((seq > k1) & (seq < k2)).sum() > 20
    assert by_a[seq > k2].all()
    assert s["deadline_misses"] == 0 and s["invalid"] == 0 and s["stale"] == 0
    assert s["policy"]["update_cycles_latency_ms"]["cycles"] >= 20  # the first update's shadow run
    assert s["policy"]["artifact"] == str(a.resolve())


def test_updates_that_do_not_check_out_are_refused_and_the_old_policy_keeps_serving(
    cartpole_all, cartpole_flipped, pendulum_fp32, tmp_path: Path
) -> None:
    _, root = cartpole_all
    a = root / "fp32"
    corrupt = tmp_path / "corrupt"
    shutil.copytree(a, corrupt)
    model = bytearray((corrupt / "policy.tflite").read_bytes())
    model[len(model) // 2] ^= 0xFF
    (corrupt / "policy.tflite").write_bytes(bytes(model))
    _, pendulum = pendulum_fp32
    steps = [
        (pendulum, "refused", 1),
        (corrupt, "refused", 2),
        (cartpole_flipped, "refused", 3),
        (a, "unchanged", 1),
    ]
    s = _update_run(tmp_path, a, steps)
    reasons = [u["reason"] for u in s["policy"]["history"]]
    assert "observation has shape [3]" in reasons[0]
    assert "does not match its sha256" in reasons[1]
    assert "agreed with the serving policy's in" in reasons[2] and "--shadow-min-agreement 90%" in reasons[2]
    assert s["policy"]["updates"] == {"accepted": 0, "refused": 3, "unchanged": 1, "superseded": 0}
    trace = _served_trace(tmp_path / "trace.jsonl")
    assert len(trace) > 100 and _served_by(trace, Policy.load(a)).all()  # A served every step
    log = (tmp_path / "serve.log").read_text()
    assert log.count("policy update refused") == 3 and "Traceback" not in log


def _serve_flags(url: str, art: Path) -> list[str]:
    return [
        "serve", str(art), "--endpoint", url, "--period-ms", "10", *NO_MISS, "--timeout-ms", "800",
        "--stats-interval", "0.5", "--cycles", "150", "--summary",
    ]  # fmt: skip


def test_a_config_file_gives_the_run_of_the_same_flags(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    art = root / "fp32"
    runs = {}
    for how in ("flags", "file"):
        url = f"opc.tcp://127.0.0.1:{free_port()}"
        out = tmp_path / how
        (out / "out").mkdir(parents=True)
        if how == "flags":
            args = [*_serve_flags(url, art), str(out / "out" / "serve.json")]
        else:
            (out / "serve.yaml").write_text(
                f"artifact: {art}\nendpoint: {url}\nperiod_ms: 10\ndeadline-ms: {NO_MISS[1]}\ntimeout_ms: 800\n"
                "stats_interval: 0.5\ncycles: 150\nsummary: out/serve.json   # relative to this file\n"
            )
            args = ["serve", "--config", str(out / "serve.yaml")]
        with running(sim_args(url, "--trace", str(out / "trace.jsonl")), out / "sim.log") as sim:
            wait_for_server(url)
            done = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=120, cwd="/")
            assert done.returncode == 0, done.stderr
            assert stop(sim) == 0
        runs[how] = json.loads((out / "out" / "serve.json").read_text()), _trace(out / "trace.jsonl")
    (flags, flags_trace), (file, file_trace) = runs["flags"], runs["file"]
    same = ("artifact", "security", "period_ms", "deadline_ms", "mode", "cycles", "ok", "invalid", "stale")
    assert {k: flags[k] for k in same} == {k: file[k] for k in same}
    assert flags["cycles"] == 150 and flags["period_ms"] == 10 and flags["deadline_ms"] == float(NO_MISS[1])
    assert flags["deadline_misses"] == file["deadline_misses"] == 0
    assert flags_trace[:100] == file_trace[:100]  # the same plant, the same actions


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("perod_ms: 20\n", "unknown option 'perod_ms' (did you mean period_ms?)"),
        ("period_ms: fast\n", "period_ms: 'fast': give a finite number from 1 to 60000 ms"),
        ("watch: please\n", "watch must be true or false"),
        ("mode: sometimes\n", "'sometimes' is not one of cyclic, subscription"),
        ("- period_ms: 20\n", "expected a mapping of option: value"),
        ("period_ms: [20\n", "serve.yaml"),
        ("endpoint: [opc.tcp://a:1, opc.tcp://b:1]\n", "endpoint must be a single a string"),
    ],
)
def test_bad_config_files_get_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / "serve.yaml").write_text(text)
    assert_clean_failure(rl2edge("serve", "--config", tmp_path / "serve.yaml"), fragment)


def test_a_missing_config_file_or_artifact_gets_one_line(tmp_path: Path) -> None:
    assert_clean_failure(rl2edge("serve", "--config", tmp_path / "nope.yaml"), "nope.yaml")
    (tmp_path / "serve.yaml").write_text("endpoint: opc.tcp://127.0.0.1:4840\n")
    assert_clean_failure(rl2edge("serve", "--config", tmp_path / "serve.yaml"), "serve needs an artifact")


HANG = """
import sys, time
from rl2edge.runtime.policy import Policy
after, calls, predict = int(sys.argv[1]), [0], Policy.predict
def hanging(self, obs, *args, **kwargs):
    calls[0] += 1
    if calls[0] > after:
        time.sleep(3600)  # a hung interpreter: the event loop blocks
    return predict(self, obs, *args, **kwargs)
Policy.predict = hanging
from rl2edge.cli.app import main
sys.exit(main(sys.argv[2:]))
"""


def test_systemd_watchdog_is_petted_while_the_loop_runs_and_not_once_it_hangs(
    cartpole_all, tmp_path: Path
) -> None:
    _, root = cartpole_all
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.1)
    (tmp_path / "hang.py").write_text(HANG)
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"}
    received: list[tuple[float, str]] = []

    def collect(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                received.append((time.monotonic(), sock.recv(4096).decode()))
            except TimeoutError:
                pass

    with running(sim_args(url), tmp_path / "sim.log"):
        wait_for_server(url)
        cmd = [
            sys.executable,
            str(tmp_path / "hang.py"),
            "150",
            "serve",
            str(root / "fp32"),
            "--endpoint",
            url,
        ]
        with (tmp_path / "serve.log").open("wb") as log:
            serve = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                collect(2.0)  # start-up, then cycles at 20 ms
                assert serve.poll() is None
                collect(8.0)  # the 151st predict hangs 3 s into the cycles
                watched_until = time.monotonic()
                assert serve.poll() is None  # hung, not dead
            finally:
                serve.kill()
                serve.wait(timeout=10)
    sock.close()
    messages = [m for _, m in received]
    assert messages[0].startswith("READY=1"), messages[:3]
    pets = [t for t, m in received if m == "WATCHDOG=1"]
    assert len(pets) >= 10  # every 0.2 s for the ~3 s of cycles
    assert watched_until - pets[-1] > 2.5, (
        f"the last pet came {watched_until - pets[-1]:.1f} s before the end"
    )
    assert "WatchdogSec=0.4s is shorter" in (tmp_path / "serve.log").read_text()


def test_the_documented_config_file_and_unit_are_what_serve_reads(tmp_path: Path) -> None:
    """docs/examples/serve.yaml parses into serve's options (paths taken relative to its folder), and the
    unit starts serve from it with Type=notify and a watchdog above serve's stall limit."""
    from rl2edge.cli.app import parse_args

    docs = Path(__file__).resolve().parents[1] / "docs" / "examples"
    args = parse_args(["serve", "--config", str(docs / "serve.yaml"), "--period-ms", "10"])
    assert args.artifact == "/srv/rl2edge/policies/current" and args.endpoint == "opc.tcp://plc:4840"
    assert args.period_ms == 10 and args.deadline_ms == 50 and args.watch is True  # the flag overrides
    assert args.map == str(docs / "plant.yaml") and args.metrics_port == 9464
    assert args.security == "sign_and_encrypt" and args.password_file == str(docs / "password")
    assert args.realtime == 50 and args.cpu_affinity is None  # the unit's priority: serve keeps it
    unit = (docs / "rl2edge-serve.service").read_text()
    assert "CPUSchedulingPriority=50" in unit and "LimitMEMLOCK=infinity" in unit
    assert (
        "Type=notify" in unit
        and "ExecStart=/opt/rl2edge/bin/rl2edge serve --config /etc/rl2edge/serve.yaml" in unit
    )
    watchdog_s = float(
        next(ln for ln in unit.splitlines() if ln.startswith("WatchdogSec=")).split("=")[1].rstrip("s")
    )
    assert watchdog_s > 5.0 + 1.0 + 1.0  # connect timeout + longest backoff + 1 s: serve's stall limit


def test_a_metrics_port_in_use_is_one_line(cartpole_all) -> None:
    _, root = cartpole_all
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = rl2edge("serve", root / "fp32", "--endpoint", "opc.tcp://127.0.0.1:1", "--metrics-port", port)
    assert_clean_failure(proc, f"--metrics-port {port}: the port is in use")


# ---------------------------------------------------------------------- updates judged by their own guard
def _with_bounds(src: Path, out: Path, low: list[Any], high: list[Any]) -> Path:
    """A copy of an artifact whose manifest declares other observation bounds (the manifest's own bytes
    are not among the file hashes: a deployer's edit, or an export from a narrower training env)."""
    shutil.copytree(src, out)
    m = json.loads((out / "manifest.json").read_text())
    m["observation"]["low"], m["observation"]["high"] = low, high
    (out / "manifest.json").write_text(json.dumps(m))
    return out


def test_an_update_whose_bounds_would_lock_the_line_is_refused(cartpole_all, tmp_path: Path) -> None:
    """Bounds narrower than the plant's live data: 100 % agreement on the observations both accept, but most
    live observations are invalid under its own guard. It used to take over and hold the safe action."""
    a = cartpole_all[1] / "fp32"
    narrow = _with_bounds(a, tmp_path / "narrow", [-0.05] * 4, [0.05] * 4)
    s = _update_run(tmp_path, a, [(narrow, "refused", 1)])
    why = s["policy"]["history"][0]["reason"]
    assert (
        "under its own observation bounds" in why and "would be invalid" in why and "observation[" in why
    ), why
    assert s["policy"]["artifact"] == str(a.resolve())  # what serves did not change
    assert _served_by(_served_trace(tmp_path / "trace.jsonl"), Policy.load(a)).all()


def test_a_line_locked_by_bad_bounds_is_freed_by_a_fixed_artifact_and_a_rollback(
    cartpole_all, tmp_path: Path
) -> None:
    """Serving an artifact whose bounds refuse every live observation (INVALID on every cycle), a
    corrected artifact takes over: its shadow run compares it with what the serving policy would have
    answered. Pointing back at the locked one then is a rollback: known-good, no shadow run needed."""
    a = cartpole_all[1] / "fp32"
    narrow = _with_bounds(a, tmp_path / "narrow", [-0.05] * 4, [0.05] * 4)
    s = _update_run(tmp_path, narrow, [(a, "accepted", 1), (narrow, "accepted", 2)])
    fixed, back = s["policy"]["history"]
    assert fixed["shadow"]["agreement"] == 1.0 and not fixed["rollback"]
    assert back["rollback"] and back["shadow"] is None
    assert s["invalid"] > 0 and s["ok"] > 20


@pytest.mark.parametrize("how", ["fifo", "sparse"])
def test_update_reads_are_bounded(cartpole_all, tmp_path: Path, how: str) -> None:
    """A manifest that is a FIFO wedged the update thread (every later update ignored, no exit); a 1 GB
    sparse one was read into memory. Both are refused unread, a later good update still takes over, and
    serve stops promptly."""
    a = cartpole_all[1] / "fp32"
    bad = tmp_path / "bad"
    shutil.copytree(a, bad)
    (bad / "manifest.json").unlink()
    if how == "fifo":
        os.mkfifo(bad / "manifest.json")
    else:
        with open(bad / "manifest.json", "wb") as f:
            f.truncate(1 << 30)
    good = tmp_path / "good"
    shutil.copytree(a, good)
    t0 = time.monotonic()
    s = _update_run(tmp_path, a, [(bad, "refused", 1), (good, "accepted", 1)], "--shadow-cycles", "5")
    first = s["policy"]["history"][0]["reason"]
    assert ("not a regular file" in first) if how == "fifo" else ("bytes, over the" in first), first
    assert s["policy"]["artifact"] == str(good.resolve()) and time.monotonic() - t0 < 90
    assert s["test_peak_rss_kb"] < 400_000  # serve, some 100 MB, never held the 1 GB file (1.08 GB before)


def _blocks_sighup(pid: int) -> bool:
    """The process's blocked-signal mask (Linux /proc) holds SIGHUP (signal 1: bit 0)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk:"))
    return bool(int(mask, 16) & 1)


def test_sighup_while_starting_is_a_queued_update_not_an_exit(cartpole_all, tmp_path: Path) -> None:
    """SIGHUP from serve's first instruction on (systemctl reload right after a restart): serve used to die
    with exit 129 until its loop ran, some 1 s of imports and connecting. The flood starts once main() has
    run its first line (the interpreter's own start-up, before any of rl2edge's code, precedes it)."""
    a = cartpole_all[1] / "fp32"
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    summary = tmp_path / "serve.json"
    with running(sim_args(url), tmp_path / "sim.log") as sim:
        wait_for_server(url)
        with running(
            ["serve", str(a), "--endpoint", url, "--summary", str(summary)], tmp_path / "serve.log"
        ) as serve:
            wait_for("SIGHUP blocked", lambda: _blocks_sighup(serve.pid) or serve.poll() is not None, 10)
            sent, t0 = 0, time.monotonic()
            while time.monotonic() - t0 < 4.0:
                if serve.poll() is not None:
                    break
                serve.send_signal(signal.SIGHUP)
                sent += 1
                time.sleep(0.01)
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()[-2000:]
        assert stop(sim) == 0
    s = json.loads(summary.read_text())
    assert sent > 100 and s["policy"]["updates"]["unchanged"] >= 1 and s["cycles"] > 0
