"""The model in its own process (runtime.model_process): what serve runs. A model that crashes, hangs or
is corrupt costs its child process (a BackendError per call, a restart with backoff), never the caller."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import BackendError, ManifestError
from rl2edge.fileio import sha256_file
from rl2edge.runtime.manifest import load_manifest
from rl2edge.runtime.model_process import ProcessBackend
from rl2edge.runtime.policy import Policy
from testkit.observations import random_observations


class FaultyBackend(ProcessBackend):
    """The real child with a fault injected into its interpreter (testkit/faulty_model_process.py)."""

    child_module = "testkit.faulty_model_process"

    def __init__(self, model: Path, every: int, kind: str, call_timeout_s: float):
        self.child_env = {"FAULT_EVERY": str(every), "FAULT_SIGNAL": kind}
        super().__init__(model, call_timeout_s=call_timeout_s)


def faulty_policy(art: Path, every: int, kind: str = "SEGV", call_timeout_s: float = 1.0) -> Policy:
    manifest = load_manifest(art)
    return Policy(manifest, FaultyBackend(manifest.file(manifest.model["file"]), every, kind, call_timeout_s))


def _until(predicate, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["fp32", "int8"])
def test_predicts_what_the_in_process_interpreter_predicts(cartpole_all, mode: str) -> None:
    art = cartpole_all[1] / mode
    inside, apart = Policy.load(art), Policy.load(art, isolate=True)
    try:
        assert apart.backend_name.endswith("(model process)")
        obs = random_observations("CartPole-v1", 300, seed=5)
        # the same engine, model file and thread count on the same CPU: the same integer action
        assert [apart.predict(o) for o in obs] == [inside.predict(o) for o in obs]
        assert apart.backend.stats.to_json()["starts"] == 1
    finally:
        apart.close()


def test_box_actions_and_folded_noise_run_in_the_model_process(pendulum_fp32) -> None:
    art = pendulum_fp32[1]
    inside, apart = Policy.load(art, explore=False), Policy.load(art, isolate=True, explore=False)
    try:
        obs = random_observations("Pendulum-v1", 200, seed=6)
        got = np.array([apart.predict(o) for o in obs])
        want = np.array([inside.predict(o) for o in obs])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # same engine and file: float32 ulps at most
    finally:
        apart.close()


@pytest.mark.parametrize("kind", ["SEGV", "ABRT"])
def test_a_crash_costs_a_call_and_the_child_is_restarted(cartpole_all, kind: str) -> None:
    policy = faulty_policy(cartpole_all[1] / "fp32", every=20, kind=kind)
    obs = random_observations("CartPole-v1", 200, seed=7)
    outcomes = []
    try:
        for o in obs:
            try:
                outcomes.append(int(policy.predict(o)))
            except BackendError as exc:
                outcomes.append(str(exc))
                _until(lambda: policy.backend._child is not None)  # restarted in the background
        errors = [o for o in outcomes if isinstance(o, str)]
        name = "SIGSEGV" if kind == "SEGV" else "SIGABRT"
        assert errors and all(f"died from {name}" in e for e in errors), errors[:3]
        stats = policy.backend.stats.to_json()
        assert stats["crashes"] == len(errors) == stats["signals"][name] and stats["restarts"] == len(errors)
        assert len(outcomes) - len(errors) >= 180  # every other call answered
    finally:
        policy.close()


def test_calls_fail_fast_while_the_child_restarts(cartpole_all) -> None:
    policy = Policy.load(cartpole_all[1] / "fp32", isolate=True)
    o = random_observations("CartPole-v1", 1, seed=8)[0]
    try:
        os.kill(policy.backend._child.proc.pid, signal.SIGKILL)
        with pytest.raises(BackendError, match="was killed by SIGKILL from outside"):
            policy.predict(o)
        t0 = time.perf_counter()
        with pytest.raises(BackendError, match="restarting"):
            policy.predict(o)
        assert time.perf_counter() - t0 < 0.05  # no wait on the control path
        _until(lambda: policy.backend._child is not None)
        assert policy.predict(o) in (0, 1)
    finally:
        policy.close()


def test_a_hung_child_is_killed_at_the_call_timeout(cartpole_all) -> None:
    policy = faulty_policy(cartpole_all[1] / "fp32", every=3, kind="HANG", call_timeout_s=0.2)
    o = random_observations("CartPole-v1", 1, seed=9)[0]
    try:
        policy.predict(o)  # run 2 (the start-up check was run 1)
        hung = policy.backend._child.proc
        t0 = time.perf_counter()
        with pytest.raises(BackendError, match="did not answer within 200 ms and was killed"):
            policy.predict(o)  # run 3 hangs
        assert 0.15 < time.perf_counter() - t0 < 1.0
        assert hung.wait(timeout=5) == -signal.SIGKILL
        assert policy.backend.stats.timeouts == 1
    finally:
        policy.close()


def test_close_leaves_no_child(cartpole_all) -> None:
    policy = Policy.load(cartpole_all[1] / "int8", isolate=True)
    proc = policy.backend._child.proc
    policy.close()
    assert proc.wait(timeout=5) is not None


def test_a_model_that_cannot_load_is_refused_with_one_line(cartpole_all) -> None:
    """A model whose start-up run crashes its child: refused at load with one line, every time it is loaded
    (each load is checked afresh, never from a cached verdict)."""
    art = cartpole_all[1] / "fp32"
    for _ in range(2):
        with pytest.raises(ManifestError, match="died from SIGSEGV when loading and running it once"):
            faulty_policy(art, every=0)


@pytest.mark.integration  # 24 model processes: some 50 s, over the default suite's budget
def test_random_corruptions_never_reach_the_caller(cartpole_all, tmp_path: Path) -> None:
    """Random byte corruptions of a real int8 model, its hash recomputed (a deployer's bad copy that still
    checks out): each is refused at load with one line, or serves; a crash costs a call, never this process."""
    src = cartpole_all[1] / "int8"
    rng = np.random.default_rng(2024)
    obs = random_observations("CartPole-v1", 50, seed=10)
    outcomes = {"refused": 0, "served": 0, "crashed calls": 0}
    for case in range(24):
        art = tmp_path / f"case{case}"
        shutil.copytree(src, art)
        model = bytearray((art / "policy.tflite").read_bytes())
        for _ in range(int(rng.integers(1, 4))):
            model[int(rng.integers(16, len(model)))] = int(rng.integers(256))
        (art / "policy.tflite").write_bytes(bytes(model))
        manifest = json.loads((art / "manifest.json").read_text())
        manifest["files"]["policy.tflite"] = sha256_file(art / "policy.tflite")
        (art / "manifest.json").write_text(json.dumps(manifest))
        try:
            policy = Policy.load(art, isolate=True, call_timeout_s=2.0)
        except (ManifestError, BackendError) as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
            continue
        try:
            for o in obs:
                try:
                    policy.predict(o)
                except BackendError:
                    outcomes["crashed calls"] += 1
            outcomes["served"] += 1
        finally:
            policy.close()
    assert outcomes["refused"] + outcomes["served"] == 24, outcomes


@pytest.mark.integration
def test_a_crashing_model_served_for_30_s_costs_cycles_not_the_service(cartpole_all, tmp_path: Path) -> None:
    """serve's loop and plant service in this process, plc-sim beside them on loopback, the model's child
    SIGSEGVs every 75th run for 30 s: each crash is an INFERENCE_ERROR cycle answered with the safe action,
    the child comes back, the loop never stops. At 10 s a hot update to a model that crashes every 5th run
    is requested: its shadow run sees it crash and refuses it; it never serves."""
    from rl2edge.plc_bridge.client import BridgeConfig
    from rl2edge.plc_bridge.loop import LoopConfig
    from rl2edge.plc_bridge.metrics import HealthConfig
    from rl2edge.plc_bridge.policy_update import UpdateConfig
    from rl2edge.plc_bridge.service import ServeService, ServiceConfig
    from rl2edge.plc_bridge.sim import PlcSim, SimConfig
    from testkit.plc import free_port

    art = cartpole_all[1] / "fp32"
    candidate = cartpole_all[1] / "int8"  # another artifact: a copy of the serving one would be a rollback
    current = tmp_path / "current"
    current.symlink_to(art)
    trace = tmp_path / "trace.jsonl"

    async def scenario() -> dict:
        url = f"opc.tcp://127.0.0.1:{free_port()}"
        sim = PlcSim(SimConfig("CartPole-v1", endpoint=url, mode="lockstep", trace=trace))
        stop_sim, stop = asyncio.Event(), asyncio.Event()
        sim_task = asyncio.create_task(sim.run(stop_sim))
        while sim.server is None:
            await asyncio.sleep(0.02)
        updates = UpdateConfig(current, load=lambda p: faulty_policy(p, every=5), shadow_cycles=50)
        service = ServeService(
            faulty_policy(art, every=75),
            BridgeConfig(url),
            LoopConfig(period_ms=20),
            ServiceConfig(updates=updates, health=HealthConfig()),
        )
        task = asyncio.create_task(service.run(stop))
        try:
            await asyncio.sleep(10)
            nxt = tmp_path / "next"
            nxt.symlink_to(candidate)
            os.replace(nxt, current)
            service.updates.request("test")
            await asyncio.sleep(20)
            assert not task.done()
        finally:
            stop.set()
            summary = await task
            service.close()
            stop_sim.set()
            await sim_task
        return summary

    s = asyncio.run(scenario())
    mp = s["model_process"]
    assert mp["crashes"] >= 5 and mp["signals"]["SIGSEGV"] == mp["crashes"]
    assert (
        mp["crashes"] - 1 <= mp["restarts"] <= mp["crashes"]
    )  # the last may still be restarting at the stop
    assert s["inference_errors"] >= mp["crashes"] and s["ok"] > 500, s
    updates = s["policy"]
    assert updates["updates"]["accepted"] == 0 and updates["updates"]["refused"] == 1
    assert "died from SIGSEGV" in updates["history"][0]["reason"]
    assert updates["artifact"] == str(art.resolve())
    # the plant's own trace: every step the plant took was on the policy's action or the safe one (0)
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(steps) > 500 and {int(r["action"][0]) for r in steps} <= {0, 1}


def _model_children() -> set[int]:
    """This process's children that run a model process."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and b"rl2edge.runtime.model_process" in cmdline:
            out.add(int(entry.name))
    return out


@pytest.mark.integration  # 10 kills with the restart backoff between them: about 25 s
def test_a_kill_storm_counts_every_death_and_blames_no_file(cartpole_all, caplog) -> None:
    """Every model process killed from outside is counted, including the ones killed while they restart,
    and the log names the signal, not the file. Before: a storm of 10 SIGKILLs counted 4, and the log said
    the file was corrupt."""
    import logging

    caplog.set_level(logging.INFO, logger="rl2edge")
    policy = Policy.load(cartpole_all[1] / "fp32", isolate=True)
    backend = policy.backend
    o = random_observations("CartPole-v1", 1, seed=8)[0]
    killed: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(killed) < 10:
            assert time.monotonic() < deadline, f"{len(killed)} kills in 120 s"
            for pid in _model_children() - killed:  # a fresh child: most are still loading the model
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            try:
                policy.predict(o)  # a call finds a running child that died
            except BackendError:
                pass
            time.sleep(0.005)
        _until(lambda: backend._child is not None and policy.predict(o) in (0, 1), within_s=60)
        stats = backend.stats.to_json()
        assert stats["crashes"] == 10 and stats["signals"] == {"SIGKILL": 10}, stats
        failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert failures and all("SIGKILL from outside" in m for m in failures), failures
        assert not any("corrupt" in m for m in failures), failures
    finally:
        policy.close()
