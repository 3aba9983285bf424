"""`rl2edge serve` against a PLC it did not write: the node-opcua stand-in (testkit/standin_plc.py), laid
out as an S7-1500 or CODESYS data block exposes it (typed scalar variables, or arrays, in the server's
own namespace URI, the observation read-only for clients).

One test per defect of the real-PLC issue: a scalar action written as a scalar; a refused write that
neither reconnects nor steps the plant; the handshake that cannot step on a stale command; counters
that wrap in the node's type; nsu= NodeIds after the namespace index moved; Bad quality; subscription
mode from the CLI; an untrusted certificate; a strict-JSON summary; STARTUP and SHUTDOWN answering
nothing. And the closed loop over it gives exactly `rl2edge evaluate`'s returns.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.client import BridgeConfig, PlantIo, PlcClient
from rl2edge.plc_bridge.nodemap import load_node_map
from rl2edge.plc_bridge.security import make_certificate
from rl2edge.runtime import Policy
from rl2edge.train.core.evaluation import evaluate
from testkit.plc import NO_MISS, free_port, running, start, stop
from testkit.standin_plc import StandinPlc

CARTPOLE = PlantIo(4, 1, True, (0.0,), (1.0,))


def _map(plc: StandinPlc, path: Path, **extra: Any) -> Path:
    nsu = extra.pop("nsu", True)
    path.write_text(yaml.safe_dump({**plc.node_map(nsu=nsu), **extra}))
    return path


def _serve(artifact: Path, plc: StandinPlc, node_map: Path, summary: Path, *extra: str) -> list[str]:
    return [
        "serve",
        str(artifact),
        "--endpoint",
        plc.endpoint,
        "--map",
        str(node_map),
        "--summary",
        str(summary),
        *extra,
    ]


def _until(predicate: Any, within_s: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} not reached within {within_s} s")


def _strict_json(path: Path) -> dict[str, Any]:
    def refuse(token: str) -> None:
        raise ValueError(f"{path} is not strict JSON: {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("pki")
    return {name: make_certificate(d, name, f"urn:rl2edge:{name}", "127.0.0.1") for name in ("plc", "serve")}


def _security_args(pki: dict[str, tuple[Path, Path]]) -> list[str]:
    cert, key = pki["serve"]
    return [
        "--security",
        "sign_and_encrypt",
        "--cert",
        str(cert),
        "--key",
        str(key),
        "--server-cert",
        str(pki["plc"][0]),
    ]


# ------------------------------------------------------------------------------------ closed loop
@pytest.mark.parametrize(
    ("env_id", "layout", "security", "mode"),
    [
        ("CartPole-v1", "scalar", "none", "cyclic"),  # Float scalars in, an Int16 scalar out
        ("CartPole-v1", "array", "none", "subscription"),  # Float[4] in, Int16[1] out
        ("CartPole-v1", "scalar", "sign_and_encrypt", "cyclic"),
        ("Pendulum-v1", "scalar", "none", "cyclic"),  # a Box action as a Float scalar
    ],
)
def test_closed_loop_over_node_opcua_gives_the_returns_of_evaluate(
    request: pytest.FixtureRequest, pki, tmp_path: Path, env_id: str, layout: str, security: str, mode: str
) -> None:
    if env_id == "CartPole-v1":
        art, episodes = request.getfixturevalue("cartpole_all")[1] / "fp32", 3
        types = None
    else:
        art, episodes = request.getfixturevalue("pendulum_fp32")[1], 2
        types = {"Act": "Float"}
    sec: dict[str, Any] = {}
    if security != "none":
        cert, key = pki["plc"]
        sec = {"security": security, "certificate": cert, "private_key": key, "trusted": [pki["serve"][0]]}
    summary = tmp_path / "serve.json"
    with StandinPlc(
        env_id, seed=3, episodes=episodes, layout=layout, types=types, workdir=tmp_path / "plc", **sec
    ) as plc:
        node_map = _map(plc, tmp_path / "map.yaml")
        extra = ["--period-ms", "5", *NO_MISS, "--mode", mode, *(_security_args(pki) if sec else [])]
        with running(_serve(art, plc, node_map, summary, *extra), tmp_path / "serve.log") as serve:
            returns = plc.wait_episodes(180)
            stats = plc.stats()
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
    s = _strict_json(summary)
    assert s["deadline_misses"] == 0
    assert returns == evaluate(Policy.load(art).predict, env_id, episodes, 3).returns
    assert s["invalid"] == 0 and s["write_rejected"] == 0 and s["reconnects"] == 0, s
    assert stats["writes"]["rejected"] == 0
    log = (tmp_path / "serve.log").read_text()
    if mode == "subscription":  # the server saw a subscription, and its revision of 5 ms was logged
        assert stats["subscriptions"] >= 1 and s["mode"] == "subscription"
        assert s["publishing_interval_ms"] is not None
        if s["publishing_interval_ms"] > 5:
            assert "revised the publishing interval from 5 ms" in log
    else:
        assert stats["subscriptions"] == 0


# ------------------------------------------------------------------------------ faults, one run
def test_refused_writes_and_bad_quality_give_the_safe_action_without_reconnect_or_step(
    cartpole_all, tmp_path: Path
) -> None:
    """No plant: the test plays the PLC program, publishing observations by hand."""
    art = cartpole_all[1] / "fp32"
    summary = tmp_path / "serve.json"
    healthy = [0.0, 0.0, 0.01, 0.0]
    with StandinPlc(None, obs_dim=4, act_dim=1, workdir=tmp_path / "plc") as plc:
        plc.observe(healthy)
        node_map = _map(plc, tmp_path / "map.yaml", safe_action=1, stale_cycles=1000)
        with running(
            _serve(art, plc, node_map, summary, "--period-ms", "10"), tmp_path / "serve.log"
        ) as serve:
            _until(
                lambda: (v := plc.get())["ActSeq"] == v["ObsSeq"] and v["Status"] == 0, what="first answer"
            )
            steps = plc.stats()["steps"]
            # 1-3. The PLC refuses the action (its interface's range check): WRITE_REJECTED, no answer.
            plc.reject("Act_0", "BadOutOfRange")
            seq = plc.observe(healthy)
            _until(lambda: plc.get()["Status"] == 7, what="WRITE_REJECTED")
            time.sleep(0.3)  # some 30 cycles against the refusing PLC
            v = plc.get()
            assert v["ActSeq"] != seq and v["Status"] == 7  # never answered: the plant cannot step on it
            assert plc.stats()["steps"] == steps
            plc.reject("Act_0", None)
            _until(lambda: plc.get()["ActSeq"] == seq, what="answer once the PLC accepts again")
            assert plc.get()["Status"] == 0 and plc.stats()["steps"] == steps + 1
            # 6. A sensor failure: INVALID and the safe action, until the quality is Good again.
            seq = plc.observe([0.0, 0.0, -0.01, 0.0])
            plc.set("Obs_1", 0.0, status="BadSensorFailure")
            _until(lambda: plc.get()["Status"] == 1, what="INVALID on BadSensorFailure")
            assert plc.get()["Act_0"] == 1  # the safe action
            plc.set("Obs_2", -0.01, status="UncertainLastUsableValue")
            plc.set("Obs_1", 0.0, status="Good")
            time.sleep(0.1)
            assert plc.get()["Status"] == 1  # Uncertain is not good enough either
            plc.set("Obs_2", -0.01, status="Good")
            _until(lambda: plc.get()["Status"] == 0, what="OK again")
            assert stop(serve) == 0
    s = _strict_json(summary)
    assert s["write_rejected"] >= 10 and s["bad_quality"] >= 5 and s["invalid"] >= s["bad_quality"]
    assert s["reconnects"] == 0 and s["connection_losses"] == 0
    log = (tmp_path / "serve.log").read_text()
    assert log.count("WRITE_REJECTED: the PLC refused action") == 1  # logged on the transition only
    assert "BadOutOfRange" in log and "BadSensorFailure" in log and "Traceback" not in log


@pytest.mark.parametrize(("heartbeat", "top"), [("Byte", 255), ("Int16", 32767), ("UInt16", 65535)])
def test_counters_wrap_in_the_nodes_own_type(cartpole_all, tmp_path: Path, heartbeat: str, top: int) -> None:
    art = cartpole_all[1] / "fp32"
    summary = tmp_path / "serve.json"
    with StandinPlc(
        "CartPole-v1",
        seed=0,
        episodes=1,
        types={"Heartbeat": heartbeat},
        initial={
            "Heartbeat": top - 4,
            "ObsSeq": 2**31 - 4,
        },  # the PLC's DINT wraps to -2**31 within the episode
        workdir=tmp_path / "plc",
    ) as plc:
        node_map = _map(plc, tmp_path / "map.yaml")
        with running(
            _serve(art, plc, node_map, summary, "--period-ms", "5", *NO_MISS), tmp_path / "serve.log"
        ) as serve:
            returns = plc.wait_episodes(60)
            assert stop(serve) == 0
            v = plc.get()
            beats = plc.stats()["writes"]["accepted"]["Heartbeat"]
    assert _strict_json(summary)["deadline_misses"] == 0
    assert returns == evaluate(Policy.load(art).predict, "CartPole-v1", 1, 0).returns
    assert v["ObsSeq"] < 0 and v["ActSeq"] < 0  # answered across the Int32 wrap
    # Every accepted write moved the heartbeat by one in the node's own type, across its wrap: the
    # value alone says nothing (a Byte that moved 258 times ends above where it started).
    low = {"Byte": 0, "Int16": -32768, "UInt16": 0}[heartbeat]
    assert beats > 4
    assert v["Heartbeat"] == low + (top - 4 + beats - low) % (top - low + 1)
    s = _strict_json(summary)
    assert s["write_rejected"] == 0 and s["reconnects"] == 0 and s["cycles"] > 10


# --------------------------------------------------------------------------- namespaces and maps
def test_a_namespace_uri_map_survives_the_index_moving(cartpole_all, tmp_path: Path) -> None:
    art = cartpole_all[1] / "fp32"
    for extra_namespaces in (0, 3):
        with StandinPlc(
            None, obs_dim=4, act_dim=1, extra_namespaces=extra_namespaces, workdir=tmp_path / "plc"
        ) as plc:
            plc.observe([0.0, 0.0, 0.01, 0.0])
            m = plc.node_map(nsu=True)
            uri = plc.namespace_uri
            m["observation_seq"] = f"nsu={uri};RL/nsu={uri};ObsSeq"  # a browse path by URI too
            if extra_namespaces == 0:
                first_index = plc.namespace_index
                by_uri = tmp_path / "by_uri.yaml"
                by_uri.write_text(yaml.safe_dump(m))
                by_index = _map(plc, tmp_path / "by_index.yaml", nsu=False)
            else:
                assert plc.namespace_index == first_index + 3
            summary = tmp_path / f"s{extra_namespaces}.json"
            proc = start(
                _serve(art, plc, by_uri, summary, "--cycles", "20", "--period-ms", "5"), tmp_path / "s.log"
            )
            assert proc.wait(timeout=60) == 0, (tmp_path / "s.log").read_text()
            assert _strict_json(summary)["cycles"] == 20
            if extra_namespaces:  # the same map by index now points at nothing: one line, exit 2
                proc = start(_serve(art, plc, by_index, summary, "--cycles", "5"), tmp_path / "i.log")
                assert proc.wait(timeout=60) == 2
                err = (tmp_path / "i.log").read_text()
                assert "the server has no such node" in err and "Traceback" not in err


def test_maps_that_cannot_fit_are_refused_at_connect(tmp_path: Path) -> None:
    async def connect(plc: StandinPlc, io: PlantIo, **changes: Any) -> None:
        m = {**plc.node_map(), **changes}
        path = tmp_path / "m.yaml"
        path.write_text(yaml.safe_dump(m))
        async with PlcClient(BridgeConfig(plc.endpoint, node_map=load_node_map(path)), io):
            pass

    with StandinPlc(None, obs_dim=3, act_dim=1, types={"Act": "Boolean"}, workdir=tmp_path / "a") as plc:
        with pytest.raises(ConfigError, match=r"observation nodes hold 3 values.*policy reads 4"):
            asyncio.run(connect(plc, CARTPOLE))
        pendulum = PlantIo(3, 1, False, (-2.0,), (2.0,))
        with pytest.raises(ConfigError, match="continuous action cannot be written to a Boolean"):
            asyncio.run(connect(plc, pendulum))
        acrobot = PlantIo(3, 1, True, (0.0,), (2.0,))
        with pytest.raises(ConfigError, match=r"Boolean cannot hold the action indices 0\.\.2"):
            asyncio.run(connect(plc, acrobot))
        # a node the PLC writes (EpisodeStart, unmapped here): ObsSeq would be refused before, as two roles
        with pytest.raises(
            ConfigError, match=r"status .*EpisodeStart: the server does not let this user write it"
        ):
            asyncio.run(
                connect(
                    plc, PlantIo(3, 1, True, (0.0,), (1.0,)), status=plc.node_id("EpisodeStart", nsu=True)
                )
            )
        with pytest.raises(ConfigError, match="no namespace 'urn:wrong'"):
            asyncio.run(connect(plc, CARTPOLE, heartbeat="nsu=urn:wrong;s=RL.Heartbeat"))
        with pytest.raises(ConfigError, match=r"heartbeat .*Nope: the server has no such node"):
            asyncio.run(connect(plc, CARTPOLE, heartbeat=plc.node_id("Nope", nsu=True)))
    with StandinPlc(
        None, obs_dim=4, act_dim=1, types={"Act": "SByte", "ActSeq": "Int16"}, workdir=tmp_path / "b"
    ) as plc:
        with pytest.raises(ConfigError, match=r"SByte cannot hold the action indices 0\.\.300"):
            asyncio.run(connect(plc, PlantIo(4, 1, True, (0.0,), (300.0,))))
        with pytest.raises(
            ConfigError, match=r"action_seq .* Int16 and cannot echo every value of observation_seq"
        ):
            asyncio.run(connect(plc, CARTPOLE))


# ------------------------------------------------------------------------------ security, stop
def test_an_untrusted_client_certificate_is_one_line_and_exit_2(cartpole_all, pki, tmp_path: Path) -> None:
    cert, key = pki["plc"]
    with StandinPlc(
        None,
        obs_dim=4,
        act_dim=1,
        security="sign_and_encrypt",
        certificate=cert,
        private_key=key,
        workdir=tmp_path / "plc",
    ) as plc:  # trusts no client
        node_map = _map(plc, tmp_path / "map.yaml")
        args = _serve(cartpole_all[1] / "fp32", plc, node_map, tmp_path / "s.json", *_security_args(pki))
        proc = start(args, tmp_path / "serve.log")
        assert proc.wait(timeout=60) == 2
    err = (tmp_path / "serve.log").read_text()
    assert "refused this client's certificate" in err and "trusted client certificates" in err
    assert "Traceback" not in err


def test_startup_and_shutdown_answer_no_observation(cartpole_all, tmp_path: Path) -> None:
    """A long period holds serve between cycles while the PLC publishes a new observation; SIGTERM then
    writes SHUTDOWN without answering it, so a lockstep PLC does not step on the safe action."""
    summary = tmp_path / "serve.json"
    with StandinPlc(None, obs_dim=4, act_dim=1, workdir=tmp_path / "plc") as plc:
        first = plc.observe([0.0, 0.0, 0.01, 0.0])
        node_map = _map(plc, tmp_path / "map.yaml", safe_action=1)
        with running(
            _serve(cartpole_all[1] / "fp32", plc, node_map, summary, "--period-ms", "3000"),
            tmp_path / "s.log",
        ) as serve:
            _until(lambda: plc.get()["ActSeq"] == first, what="the first cycle's answer")
            assert plc.stats()["steps"] == 1
            unanswered = plc.observe([0.0, 0.0, 0.02, 0.0])
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0
        v = plc.get()
        assert v["Status"] == 5 and v["Act_0"] == 1 and v["ObsSeq"] == unanswered
        assert v["ActSeq"] == first and plc.stats()["steps"] == 1


def test_summary_is_strict_json_when_no_cycle_completed(cartpole_all, tmp_path: Path) -> None:
    summary = tmp_path / "serve.json"
    url = f"opc.tcp://127.0.0.1:{free_port()}"  # nothing listens there
    with running(
        ["serve", str(cartpole_all[1] / "fp32"), "--endpoint", url, "--summary", str(summary)],
        tmp_path / "s.log",
    ) as serve:
        time.sleep(3)
        assert stop(serve) == 0
    s = _strict_json(summary)
    assert s["cycles"] == 0 and s["latency_ms"]["p50"] is None and s["cpu_ms_per_cycle"] is None
