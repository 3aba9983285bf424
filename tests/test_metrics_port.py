"""The metrics port against misbehaving clients, over real sockets on loopback: the server of
`serve --metrics-port` (plc_bridge.metrics, started as plc_bridge.service starts it) in front of a stand-in
control loop that publishes its snapshots through the same hooks as ControlLoop and records any read of
its state from another thread."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.loop import LoopConfig
from rl2edge.plc_bridge.loop_state import Counters
from rl2edge.plc_bridge.metrics import (
    Health,
    HealthConfig,
    ServeMetrics,
    parse_metrics,
)
from rl2edge.plc_bridge.metrics_http import HttpLimits
from rl2edge.plc_bridge.policy_update import PolicyUpdates, UpdateConfig
from rl2edge.plc_bridge.slot_timer import until_slot
from rl2edge.plc_bridge.snapshot import LoopSnapshot
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.manifest import Manifest

HTTP_LOGGER = "rl2edge.plc_bridge.metrics_http"


def _manifest(path: Path, env_id: str = "CartPole-v1") -> Manifest:
    data = {
        "model": {"file": "policy.tflite"},
        "files": {"policy.tflite": hashlib.sha256(str(path).encode()).hexdigest()},
        "quantization": {"mode": "fp32"},
        "source": {"env_id": env_id, "algo": "ppo", "checkpoint": "run/final"},
    }
    return Manifest(path, data)


class StandInLoop:
    """What a ControlLoop's snapshot() shows the metrics, kept as the loop keeps it, and its hooks called as
    ServeService calls them. Any read of its state from a thread other than the one that made it is
    recorded in `foreign_reads`."""

    def __init__(self, artifact: Path, period_ms: float = 10.0):
        self._owner = threading.get_ident()
        self.foreign_reads: list[str] = []
        self.counters = Counters()
        self.connected = True
        self.progress_at = time.monotonic()
        self.last_cycle_at: float | None = None
        self.last_status: CycleStatus | None = None
        self.cfg = LoopConfig(period_ms=period_ms)
        self.policy = SimpleNamespace(
            manifest=_manifest(artifact),
            backend_name="ai-edge-litert",
            discrete=True,
            categorical=True,
            close=lambda: None,
        )
        self.updates: PolicyUpdates | None = None
        self.metrics: ServeMetrics | None = None

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_") and name != "foreign_reads" and threading.get_ident() != self._owner:
            self.foreign_reads.append(f"{name} from {threading.current_thread().name}")
        return super().__getattribute__(name)

    def snapshot(self) -> LoopSnapshot:
        """As ControlLoop.snapshot() makes it (not a full one)."""
        return LoopSnapshot(
            taken_at=time.monotonic(),
            endpoint="opc.tcp://plc:4840",
            security="none",
            mode=self.cfg.mode,
            period_ms=self.cfg.period_ms,
            deadline_ms=self.cfg.deadline_ms,
            spin_ms=self.cfg.lead_ms,
            publishing_interval_ms=None,
            connected=self.connected,
            progress_at=self.progress_at,
            last_cycle_at=self.last_cycle_at,
            last_status=self.last_status,
            counts=MappingProxyType(dict(vars(self.counters))),
            manifest=self.policy.manifest,
            backend_name=self.policy.backend_name,
            updates=None if self.updates is None else self.updates.state(),
            wall_time_s=0.0,
            cpu_s=0.0,
        )

    def cycle(self, latency_ms: float = 1.0, lateness_ms: float = 0.1) -> None:
        """What ControlLoop._cycle and _cycle_io do to this state for one OK cycle, and the hooks."""
        if self.updates is not None:
            serving = self.updates.before_cycle(self.counters.cycles)
            if serving is not None:
                self.policy = serving.policy
        self.counters.cycles += 1
        self.counters.ok += 1
        self.last_cycle_at = self.progress_at = time.monotonic()
        self.last_status = CycleStatus.OK
        if self.metrics is not None:
            self.metrics.publisher.observe(latency_ms, lateness_ms)


def _metrics_for(control: StandInLoop, limits: HttpLimits | None = None) -> ServeMetrics:
    """As ServeService makes it: the metrics read the loop's snapshots, and are shown each cycle."""
    metrics = ServeMetrics(control.snapshot, Health(control.snapshot, HealthConfig()), limits)
    control.metrics = metrics
    return metrics


def _serving(
    control: StandInLoop, body: Callable[[ServeMetrics, int], Any], limits: HttpLimits | None = None
) -> Any:
    """body(metrics, port) in a worker thread while the endpoint serves, started and stopped on an event
    loop in this thread as ServeService.run does."""
    metrics = _metrics_for(control, limits)

    async def scenario() -> Any:
        server = await metrics.start("127.0.0.1", 0)
        try:
            job = asyncio.ensure_future(asyncio.to_thread(body, metrics, server.address[1]))
            while not job.done():  # the loop keeps cycling meanwhile
                await asyncio.wait((job,), timeout=control.cfg.period_ms / 1e3)
                control.cycle()
            return job.result()
        finally:
            server.close()
            await server.wait_closed()

    result = asyncio.run(scenario())
    assert not control.foreign_reads, control.foreign_reads[:5]
    return result


def _exchange(port: int, data: bytes, *, half_close: bool = False, timeout: float = 10.0) -> bytes:
    """Send `data` (then shut our side if `half_close`) and read the answer to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _get(port: int, path: str) -> tuple[int, bytes]:
    answer = _exchange(port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return _status(answer), answer.split(b"\r\n\r\n", 1)[1]


def _warnings_by_kind(caplog: pytest.LogCaptureFixture) -> Counter[str]:
    return Counter(getattr(r, "refusal", "?") for r in caplog.records if r.levelno >= logging.WARNING)


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert "Traceback" not in caplog.text
    assert {r.name for r in caplog.records if r.levelno >= logging.WARNING} <= {HTTP_LOGGER}


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /metrics\r\n\r\n",  # no version
    b"GET  /metrics HTTP/1.1\r\n\r\n",
    b"get /metrics HTTP/1.1\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n folded: header\r\n\r\n",
    b"GET /metrics HTTP/2.0\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS to a plain port
    b"\r\n\r\n",
    b"GET /metrics\x00 HTTP/1.1\r\n\r\n",
]


def test_bad_clients_get_their_status_one_warning_per_kind_and_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """400 malformed, 431 oversized, 408 stalled, 400 cut short; a burst of 200 bad requests logs one
    WARNING per kind, never a traceback; clients that reset their connection are no error; the server
    still answers, and counts each kind."""
    caplog.set_level(logging.DEBUG)
    control = StandInLoop(tmp_path)
    control.cycle()

    def body(metrics: ServeMetrics, port: int) -> dict[str, Any]:
        stalled = []
        t0 = time.monotonic()
        for _ in range(5):  # half a request each, then silence
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            stalled.append(s)
        statuses: dict[str, list[int]] = {"malformed": [], "too_large": [], "incomplete": [], "stalled": []}
        for i in range(200):
            if i % 2 == 0:
                statuses["malformed"].append(_status(_exchange(port, MALFORMED[(i // 2) % len(MALFORMED)])))
            elif i % 4 == 1:  # one header of 9 KiB
                pad = b"X-Pad: " + b"a" * 9000 + b"\r\n"
                statuses["too_large"].append(
                    _status(_exchange(port, b"GET /metrics HTTP/1.1\r\n" + pad + b"\r\n"))
                )
            else:  # no end of head in sight: refused once the limit is passed, not at the timeout
                flood = b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: aaaaaaaa\r\n" * 1000
                try:
                    statuses["too_large"].append(_status(_exchange(port, flood)))
                except ConnectionResetError:  # answered and closed while we were still sending
                    statuses["too_large"].append(431)
        for _ in range(3):
            statuses["incomplete"].append(_status(_exchange(port, b"GET /metrics HTT", half_close=True)))
        for i in range(50):  # a request, then a reset before (or while) the answer comes: nothing to log
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                if i % 2:
                    time.sleep(0.002)
        burst_s = time.monotonic() - t0
        for s in stalled:
            with s:
                statuses["stalled"].append(_status(s.recv(4096)))
        stalled_s = time.monotonic() - t0
        code, page = _get(port, "/metrics")
        assert code == 200
        return {"statuses": statuses, "burst_s": burst_s, "stalled_s": stalled_s, "page": page.decode()}

    out = _serving(control, body)
    statuses = out["statuses"]
    assert set(statuses["malformed"]) == {400} and len(statuses["malformed"]) == 100
    assert set(statuses["too_large"]) == {431} and len(statuses["too_large"]) == 100
    assert statuses["incomplete"] == [400] * 3
    assert statuses["stalled"] == [408] * 5
    assert 1.9 <= out["stalled_s"] < 6.0  # the 2 s request time limit
    assert out["burst_s"] < 10.0  # the burst was well inside one log interval
    refused = {
        dict(k[1])["reason"]: v
        for k, v in parse_metrics(out["page"]).items()
        if k[0] == "rl2edge_metrics_refused_total"
    }
    # the 50 clients that connect and reset may find every slot taken on a slow machine (CI's edge run: 3)
    busy = refused.pop("busy")
    assert refused == {"malformed": 100, "too_large": 100, "incomplete": 3, "timeout": 5} and busy <= 50
    _no_traceback(caplog)
    warned = _warnings_by_kind(caplog)
    assert warned.pop("busy", 0) == (1 if busy else 0)
    assert warned == {"malformed": 1, "too_large": 1, "incomplete": 1, "timeout": 1}


def test_refusals_past_the_first_are_summed_up_once_per_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    control = StandInLoop(tmp_path)

    def body(metrics: ServeMetrics, port: int) -> None:
        for _ in range(20):
            assert _status(_exchange(port, b"GARBAGE\r\n\r\n")) == 400
        time.sleep(0.8)  # the interval ends: one line for the 19 not logged
        assert _status(_exchange(port, b"GARBAGE\r\n\r\n")) == 400  # the next interval's first: held

    _serving(control, body, HttpLimits(log_every_s=0.5))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "a malformed request (b'GARBAGE'), answered 400" in lines[0]
    assert "19 more in the last 0.5 s, the latest: a malformed request (b'GARBAGE')" in lines[1]
    _no_traceback(caplog)


def test_methods_paths_and_head(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    control = StandInLoop(tmp_path)
    control.cycle()

    def body(metrics: ServeMetrics, port: int) -> dict[str, bytes]:
        return {
            "post": _exchange(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"),
            "missing": _exchange(port, b"GET /favicon.ico HTTP/1.1\r\n\r\n"),
            "head": _exchange(port, b"HEAD /metrics HTTP/1.1\r\n\r\n"),
            "query": _exchange(port, b"GET /healthz?verbose=1 HTTP/1.0\n\n"),  # bare LF and HTTP/1.0 too
            "probe": _exchange(port, b"", half_close=True),  # a TCP port check: connect, close
        }

    out = _serving(control, body)
    assert _status(out["post"]) == 405 and b"Allow: GET, HEAD\r\n" in out["post"]
    assert _status(out["missing"]) == 404
    head, body_of_head = out["head"].split(b"\r\n\r\n", 1)
    assert _status(out["head"]) == 200 and body_of_head == b"" and b"Content-Length: " in head
    assert _status(out["query"]) == 200 and out["query"].endswith(b"ok: the control loop is running\n")
    assert out["probe"] == b""
    assert not caplog.records  # none of these is a refusal


FLOOD = """
import json, selectors, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
t0 = time.monotonic()
held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
print(json.dumps({"opened_s": time.monotonic() - t0}), flush=True)
sys.stdin.readline()  # read the answers
got = {s.fileno(): b"" for s in held}
with selectors.DefaultSelector() as sel:
    for s in held:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    deadline = time.monotonic() + 8
    while sel.get_map() and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.1):
            try:
                chunk = key.fileobj.recv(65536)
            except ConnectionResetError:
                chunk = b""
            got[key.fileobj.fileno()] += chunk
            if not chunk:
                sel.unregister(key.fileobj)
statuses = {}
for data in got.values():
    status = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "reset"
    statuses[status] = statuses.get(status, 0) + 1
print(json.dumps({"answered_s": time.monotonic() - t0, "statuses": statuses}), flush=True)
sys.stdin.readline()  # close them
for s in held:
    s.close()
"""


@pytest.mark.serial(
    "a flood against the connection cap, timed to its release: a neighbour's load delays the release"
)
def test_a_flood_of_connections_stays_within_the_cap_and_health_answers_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process opens 500 connections and holds them: 32 at most are served at once (each answered
    408 when its 2 s pass), the others answered 503 at once (or, past 128 answers waiting for their client
    to close, closed at once). A fresh /healthz is answered once the slots are free again, while the 500
    are still open on the client side, and after they close."""
    caplog.set_level(logging.DEBUG)
    control = StandInLoop(tmp_path)

    def body(metrics: ServeMetrics, port: int) -> dict[str, Any]:
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, str(port), "500"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert flood.stdin is not None and flood.stdout is not None
        out = json.loads(flood.stdout.readline())
        for _ in range(100):  # while the slots are taken: connections reset before they are answered
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        flood.stdin.write("read\n")
        flood.stdin.flush()
        out |= json.loads(flood.stdout.readline())
        t0 = time.monotonic()
        out["fresh"] = _get(port, "/healthz")  # the 500 still open on the other side
        out["fresh_s"] = time.monotonic() - t0
        flood.communicate("close\n", timeout=30)
        out["after"] = _get(port, "/healthz")[0]
        out["peak"] = metrics.http.peak_active
        out["busy"] = metrics.http.refused["busy"]
        return out

    out = _serving(control, body)
    statuses = out["statuses"]
    assert out["peak"] <= 32, out
    # A client faster than the server fills the listen queue (64) and waits out a SYN retry (1 s): the
    # 500 take seconds to open, and each 2 s the slots of the 32 answered 408 go to the next ones.
    assert statuses.get("408", 0) <= 32 * (1 + out["opened_s"] // 2) and statuses.get("503", 0) >= 100, out
    assert sum(statuses.values()) == 500 and out["busy"] >= 500 - statuses.get("408", 0), out
    assert out["answered_s"] < out["opened_s"] + 2.0 + 3.0, out
    assert out["fresh"] == (200, b"ok: the control loop is running\n") and out["fresh_s"] < 1.0, out
    assert out["after"] == 200
    _no_traceback(caplog)
    assert _warnings_by_kind(caplog) == {"busy": 1, "timeout": 1}


HAMMER = """
import json, socket, sys, threading, time
port, seconds = int(sys.argv[1]), float(sys.argv[2])
counts, seconds_served, lock = {}, set(), threading.Lock()
start = time.monotonic()
def hammer():
    end = start + seconds
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            key = data[9:12].decode() or "empty"
        except OSError as exc:
            key = type(exc).__name__
        with lock:
            counts[key] = counts.get(key, 0) + 1
            if key == "200":
                seconds_served.add(int(time.monotonic() - start))
threads = [threading.Thread(target=hammer) for _ in range(4)]
print("go", flush=True)
for t in threads: t.start()
for t in threads: t.join()
counts["seconds_served"] = sorted(s for s in seconds_served if s < seconds)
print(json.dumps(counts), flush=True)
"""


async def _stand_in_loop(control: StandInLoop, seconds: float) -> list[float]:
    """The serve loop's timing, without the PLC: a cycle every 10 ms slot, woken as ControlLoop wakes
    (slot_timer.until_slot with its 2 ms lead); each slot's start lateness in ms."""
    loop = asyncio.get_running_loop()
    period, late = control.cfg.period_ms / 1e3, []
    never = loop.create_future()
    next_slot = loop.time() + period
    end = next_slot + seconds
    while next_slot < end:
        await until_slot(next_slot, control.cfg.lead_ms / 1e3, never)
        late.append((loop.time() - next_slot) * 1e3)
        control.cycle(latency_ms=late[-1] + 1.0, lateness_ms=late[-1])
        next_slot += period
        while next_slot < loop.time():  # overran: skip the slots already past, as ControlLoop does
            next_slot += period
    never.cancel()
    return late


def test_scrapers_hammering_the_port_do_not_make_the_loop_late(tmp_path: Path) -> None:
    """4 threads (in another process, as a scraper is) fetch /metrics back to back for 5 s while the
    loop's stand-in runs on 10 ms slots in this thread: its start lateness p99 stays small. The endpoint
    runs in its own thread, renders at most once per snapshot and keeps to its share of a core, so what
    the loop pays is the GIL's hand-over, not the scrapes. The machine's other load can make any one run
    late: up to 3 runs, one must pass."""
    control = StandInLoop(tmp_path)
    metrics = _metrics_for(control)

    async def scenario() -> list[dict[str, Any]]:
        server = await metrics.start("127.0.0.1", 0)
        runs = []
        try:
            for _ in range(3):
                quiet = await _stand_in_loop(control, 1.0)
                hammer = await asyncio.to_thread(
                    subprocess.Popen,
                    [sys.executable, "-c", HAMMER, str(server.address[1]), "5"],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert hammer.stdout is not None
                assert (await asyncio.to_thread(hammer.stdout.readline)).strip() == "go"
                loaded = await _stand_in_loop(control, 4.5)
                out, _ = await asyncio.to_thread(hammer.communicate, timeout=60)
                runs.append({"quiet": quiet, "loaded": loaded, "answers": json.loads(out)})
                if np.percentile(loaded, 99) < 5.0:
                    break
        finally:
            server.close()
            await server.wait_closed()
        return runs

    runs = asyncio.run(scenario())
    assert not control.foreign_reads, control.foreign_reads[:5]
    report = [
        {k: np.percentile(r[k], [50, 99, 100]).round(3).tolist() for k in ("quiet", "loaded")}
        | {"answers": r["answers"]}
        for r in runs
    ]
    print("start lateness ms p50/p99/max:", report)
    last = runs[-1]
    # The scrapers were served all along: answers in each of the 5 seconds, and enough of them that the
    # port was busy. How many a second depends on the machine (1,266 here, 638 on a CI run, in 5 s on 2 cores), so
    # the floor is a tenth of the slowest seen, not a throughput target.
    assert last["answers"]["seconds_served"] == [0, 1, 2, 3, 4], report
    assert last["answers"].get("200", 0) >= 60, report
    assert len(last["loaded"]) >= 400, report
    assert np.percentile(last["loaded"], 99) < 5.0, report


def test_the_artifact_label_names_the_serving_artifact_after_a_refused_update(tmp_path: Path) -> None:
    """serve `current` -> A; the deployer points `current` at B, whose update is refused: the label keeps
    naming A (path and manifest sha256) though `current` now resolves to B. Once an update is accepted,
    it names the new one."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (a, b, c):
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({"artifact": folder.name}))
    current = tmp_path / "current"
    current.symlink_to(a)
    control = StandInLoop(current)  # loaded through the symlink, as serve loads it

    def load(path: Path) -> Any:
        if path.name == "b":
            raise ConfigError("its observation has shape [3], the serving policy's [4]")
        return SimpleNamespace(
            manifest=_manifest(path, "CartPole-v1"),
            backend_name="ai-edge-litert",
            discrete=True,
            categorical=True,
            close=lambda: None,
        )

    updates = PolicyUpdates(
        control.policy,
        UpdateConfig(artifact=current, load=load, shadow_cycles=0),
        prepare=lambda candidate, serving: SimpleNamespace(policy=candidate),
    )
    control.updates = updates  # as ServeService makes it, before ServeMetrics

    def swap_to(target: Path) -> None:
        (tmp_path / "next").symlink_to(target)
        os.replace(tmp_path / "next", current)

    async def update(until: Callable[[], bool]) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(updates.run(stop))
        updates.request("SIGHUP")
        while not until():
            await asyncio.sleep(0.01)
        stop.set()
        await task

    def labels(metrics: ServeMetrics, port: int) -> dict[str, str]:
        code, page = _get(port, "/metrics")
        assert code == 200
        return next(dict(k[1]) for k in parse_metrics(page.decode()) if k[0] == "rl2edge_artifact_info")

    metrics = _metrics_for(control)
    digest = {p: hashlib.sha256((p / "manifest.json").read_bytes()).hexdigest() for p in (a, b, c)}

    resolved: list[str] = []

    async def scenario() -> list[dict[str, str]]:
        server = await metrics.start("127.0.0.1", 0)
        port = server.address[1]
        shown = [await asyncio.to_thread(labels, metrics, port)]
        try:
            swap_to(b)
            await update(lambda: updates.counts["refused"] == 1)
            control.cycle()
            # what the label must not show: the path serve was given, resolved now
            resolved.append(await asyncio.to_thread(os.path.realpath, control.policy.manifest.path))
            shown.append(await asyncio.to_thread(labels, metrics, port))
            swap_to(c)
            await update(lambda: updates._ready is not None)
            control.cycle()  # the takeover: before_cycle installs C
            shown.append(await asyncio.to_thread(labels, metrics, port))
        finally:
            server.close()
            await server.wait_closed()
        return shown

    before, after_refusal, after_accept = asyncio.run(scenario())
    assert resolved == [str(b)]
    assert before["path"] == after_refusal["path"] == str(a.resolve())
    assert before["manifest_sha256"] == after_refusal["manifest_sha256"] == digest[a]
    assert after_refusal["sha256"] == _manifest(current).data["files"]["policy.tflite"]
    assert after_accept["path"] == str(c.resolve()) and after_accept["manifest_sha256"] == digest[c]
    assert after_accept["sha256"] == _manifest(c).data["files"]["policy.tflite"]
    assert updates.counts == {"accepted": 1, "refused": 1, "unchanged": 0, "superseded": 0}
    assert not control.foreign_reads, control.foreign_reads[:5]


def test_health_follows_the_published_heartbeat(tmp_path: Path) -> None:
    """/healthz ages with the heartbeat the loop publishes, not with the scrape; /readyz as before."""
    control = StandInLoop(tmp_path)
    metrics = _metrics_for(control)
    metrics.health.cfg = HealthConfig(periods=10, stall_s=0.3)

    def body(metrics: ServeMetrics, port: int) -> dict[str, Any]:
        out = {"no cycle": _get(port, "/readyz")}
        control_cycle_done.wait(5)
        out["cycled"] = (_get(port, "/healthz"), _get(port, "/readyz"))
        time.sleep(0.5)  # no progress published: stalled, and the last cycle is too old to be ready
        out["stalled"] = (_get(port, "/healthz"), _get(port, "/readyz"))
        return out

    control_cycle_done = threading.Event()

    async def scenario() -> dict[str, Any]:
        server = await metrics.start("127.0.0.1", 0)
        server._publishing.cancel()  # a loop blocked from here on: no snapshot is published
        try:
            job = asyncio.create_task(asyncio.to_thread(body, metrics, server.address[1]))
            await asyncio.sleep(0.2)
            control.cycle()
            control_cycle_done.set()
            return await job
        finally:
            server.close()
            await server.wait_closed()

    out = asyncio.run(scenario())
    assert out["no cycle"] == (503, b"fail: connected, no cycle completed yet\n")
    assert out["cycled"] == (
        (200, b"ok: the control loop is running\n"),
        (200, b"ok: connected, the last cycle was OK\n"),
    )
    (alive, why), (ready, why_not) = out["stalled"]
    assert alive == 503 and why.startswith(b"fail: the control loop has shown no progress for")
    assert ready == 503 and b"the last cycle completed" in why_not
