"""Dict observations over OPC UA: the node map grouped by key, plc-sim's one array node per key, the
node-opcua stand-in laid out as an S7 data block with one array per sensor, and the guard naming the key.

One small AGV artifact (examples.agv:AgvDictEnv: lidar[24], imu[2], goal[3], speed[1]), trained and
exported once for the module; every closed loop is checked against `rl2edge evaluate` on the same seeds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.binding import plant_io_of
from rl2edge.plc_bridge.client import BridgeConfig, PlcClient
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.nodemap import default_node_map, load_node_map, observation_groups
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime import Policy
from rl2edge.train.core.evaluation import evaluate
from testkit.cli import EXE, assert_clean_failure
from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server
from testkit.standin_plc import StandinPlc

ROOT = Path(__file__).resolve().parents[1]
AGV = "examples.agv:AgvDictEnv"
KEYS = [("lidar", 24), ("imu", 2), ("goal", 3), ("speed", 1)]
SEED, EPISODES = 1, 2
# plc-sim runs in its own process: `examples` is importable from the source tree
SIM_ENV = {"PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def agv_art(agv_dict_fp32: Any) -> Path:
    return agv_dict_fp32[1]


@pytest.fixture(scope="module")
def evaluated(agv_art: Path) -> list[float]:
    return evaluate(Policy.load(agv_art).predict, AGV, EPISODES, SEED).returns


def _serve(art: Path, endpoint: str, summary: Path, *extra: str) -> list[str]:
    return [
        "serve",
        str(art),
        "--endpoint",
        endpoint,
        "--period-ms",
        "5",
        *NO_MISS,
        "--summary",
        str(summary),
        *extra,
    ]


def _plc_sim_map(observation: Any) -> dict[str, Any]:
    """A node map of plc-sim's nodes, the observation as given."""
    m = default_node_map()
    return {
        "observation": observation,
        "observation_seq": m.observation_seq,
        "action": m.action[0],
        "action_seq": m.action_seq,
        "heartbeat": m.heartbeat,
        "status": m.status,
    }


def _per_key() -> dict[str, str]:
    """plc-sim's node of each key, as a per-key map lists them."""
    return {key: f"ns=2;s=rl2edge.Observation_{key}" for key, _ in KEYS}


def _until(predicate: Any, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


# ------------------------------------------------------------------------------------ closed loops
@pytest.mark.parametrize("node_map", ["per-key", "default"])
def test_plc_sim_serves_a_dict_env_and_serve_over_it_gives_the_returns_of_evaluate(
    agv_art: Path, evaluated: list[float], tmp_path: Path, node_map: str
) -> None:
    """plc-sim (--strict) lays a Dict env out one array per key, and the keys concatenated in
    `Observation`: a per-key map reads the former, the default map the latter."""
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    record, summary = tmp_path / "returns.json", tmp_path / "serve.json"
    extra: list[str] = []
    if node_map == "per-key":
        (tmp_path / "map.yaml").write_text(yaml.safe_dump(_plc_sim_map(_per_key())))
        extra = ["--map", str(tmp_path / "map.yaml")]
    sim_args = ["plc-sim", "--env", AGV, "--endpoint", url, "--seed", str(SEED), "--episodes", str(EPISODES),
                "--record", str(record), "--strict"]  # fmt: skip
    with running(sim_args, tmp_path / "sim.log", SIM_ENV) as sim:
        wait_for_server(url)
        with running(_serve(agv_art, url, summary, *extra), tmp_path / "serve.log") as serve:
            assert sim.wait(timeout=120) == 0, (tmp_path / "sim.log").read_text()
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
    assert json.loads(record.read_text())["returns"] == evaluated
    s = json.loads(summary.read_text())
    assert s["deadline_misses"] == 0 and s["invalid"] == 0 and s["write_rejected"] == 0, s
    log = (tmp_path / "serve.log").read_text()
    if node_map == "per-key":
        assert "observation lidar Double[24], imu Double[2], goal Double[3], speed Double[1]," in log
    else:
        assert "observation Double[30]," in log
    assert "observation: {lidar: ns=2;s=rl2edge.Observation_lidar, imu:" in (tmp_path / "sim.log").read_text()


@pytest.mark.parametrize("layout", ["keys", "array"])
def test_serve_over_an_s7_data_block_gives_the_returns_of_evaluate(
    agv_art: Path, evaluated: list[float], tmp_path: Path, layout: str
) -> None:
    """node-opcua, Float nodes in its own namespace URI. keys: one array per sensor and a scalar for the
    one-value speed, the map listing the keys in another order than the manifest's; array: one Float[30],
    the flat map a Dict artifact was served with before per-key maps."""
    summary = tmp_path / "serve.json"
    types = {"Act": "Float"}
    with StandinPlc(
        AGV, seed=SEED, episodes=EPISODES, layout=layout, types=types, workdir=tmp_path / "plc"
    ) as plc:
        node_map = plc.node_map(nsu=True)
        if layout == "keys":
            assert list(node_map["observation"]) == [k for k, _ in KEYS]
            node_map["observation"] = dict(reversed(node_map["observation"].items()))
        path = tmp_path / "map.yaml"
        path.write_text(yaml.safe_dump(node_map, sort_keys=False))
        serve_args = [*_serve(agv_art, plc.endpoint, summary), "--map", str(path)]
        with running(serve_args, tmp_path / "serve.log") as serve:
            returns = plc.wait_episodes(120)
            if layout == "keys":  # the plant is done: play the PLC, a lidar beam far out of its range
                obs = {key: np.zeros(size) for key, size in KEYS}
                obs["lidar"][3] = 12.5
                plc.observe(obs)
                _until(lambda: plc.get()["Status"] == CycleStatus.INVALID_OBSERVATION)
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
    assert returns == evaluated
    s = json.loads(summary.read_text())
    assert s["deadline_misses"] == 0 and s["write_rejected"] == 0 and s["reconnects"] == 0, s
    log = (tmp_path / "serve.log").read_text()
    if layout == "keys":
        assert "observation lidar Float[24], imu Float[2], goal Float[3], speed 1 x Float" in log
        assert "INVALID_OBSERVATION: lidar[3] = 12.5 is above its high 8 (outside [-0.4, 8.4]" in log
    assert "Traceback" not in log


# ------------------------------------------------------------------------- maps that do not fit
def _serve_fails(args: list[str]) -> subprocess.CompletedProcess[str]:
    # a bounded run: a map refused after the connect would otherwise have serve retry
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("observation", "message"),
    [
        (
            {k: v for k, v in _per_key().items() if k != "goal"},
            "the node map's observation lacks key(s) 'goal' (the artifact's keys: lidar, imu, goal, speed)",
        ),
        (
            {**_per_key(), "wheel": "ns=2;s=rl2edge.Observation_wheel"},
            "the node map's observation has key(s) 'wheel' the artifact does not",
        ),
    ],
    ids=["missing-key", "extra-key"],
)
def test_a_map_without_the_artifacts_keys_is_refused_before_connecting(
    agv_art: Path, tmp_path: Path, observation: dict[str, str], message: str
) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(_plc_sim_map(observation)))
    url = f"opc.tcp://127.0.0.1:{free_port()}"  # nothing listens there: refused before any connect
    assert_clean_failure(
        _serve_fails(["serve", str(agv_art), "--endpoint", url, "--map", str(path)]), message
    )


def test_a_key_whose_node_has_the_wrong_length_is_refused_at_connect(agv_art: Path, tmp_path: Path) -> None:
    keys = [("lidar", 20), *KEYS[1:]]  # the PLC's data block declares 20 beams, the artifact reads 24
    with StandinPlc(
        None, layout="keys", obs_keys=keys, types={"Act": "Float"}, workdir=tmp_path / "plc"
    ) as plc:
        path = tmp_path / "map.yaml"
        path.write_text(yaml.safe_dump(plc.node_map(nsu=False)))
        proc = _serve_fails(["serve", str(agv_art), "--endpoint", plc.endpoint, "--map", str(path)])
        lidar = plc.node_id("Obs_lidar")
    assert_clean_failure(
        proc, f"observation key 'lidar': node {lidar} holds 20 values, the artifact's key 24"
    )


SPARE = ("spare0", "spare1", "spare2", "spare3")


def test_each_keys_nodes_are_checked_at_connect_in_one_line(agv_art: Path, tmp_path: Path) -> None:
    """The bridge's connect-time checks per key, in this process (serve maps them to exit 2)."""
    policy = Policy.load(agv_art)

    def refusal(plc: StandinPlc, key: str, nodes: Any, **others: Any) -> str:
        m = plc.node_map(nsu=True)
        for spare in SPARE:  # scalar nodes of the data block the artifact has no key for
            m["observation"].pop(spare)
        m["observation"][key] = nodes
        m["observation"].update(others)  # a node given to two keys is refused first (plc_bridge.nodemap)
        path = tmp_path / "map.yaml"
        path.write_text(yaml.safe_dump(m))

        async def connect() -> None:
            async with PlcClient(
                BridgeConfig(plc.endpoint, node_map=load_node_map(path)), plant_io_of(policy)
            ):
                pass

        with pytest.raises(ConfigError) as info:
            asyncio.run(connect())
        assert "\n" not in str(info.value), str(info.value)
        return str(info.value)

    with StandinPlc(
        None,
        layout="keys",
        obs_keys=[*KEYS, *((s, 1) for s in SPARE)],
        types={"Act": "Float"},
        workdir=tmp_path / "plc",
    ) as plc:
        speed, goal = plc.node_id("Obs_speed", nsu=True), plc.node_id("Obs_goal", nsu=True)
        spares = [plc.node_id(f"Obs_{s}", nsu=True) for s in SPARE]
        assert refusal(plc, "goal", speed, speed=goal) == (
            f"observation key 'goal': node {speed} is a scalar, the artifact's key has 3 values: "
            "map one array node of length 3 or 3 scalar nodes"
        )
        assert refusal(plc, "imu", spares[:3]).startswith(
            "observation key 'imu': 3 scalar nodes, the artifact's key has 2 values"
        )
        assert refusal(plc, "imu", [goal, spares[0]], goal=spares[1:]).startswith(
            f"observation key 'imu'[0] {goal} is an array of 3: list 2 scalar nodes or one array node"
        )
        nope = plc.node_id("Nope", nsu=True)
        assert refusal(plc, "lidar", nope).startswith(
            f"observation key 'lidar' {nope}: the server has no such node"
        )


# ------------------------------------------------------------------------------------ the guard
def test_the_guard_names_the_key_and_the_index_within_it(agv_art: Path) -> None:
    policy = Policy.load(agv_art)
    loop = ControlLoop(policy, BridgeConfig("opc.tcp://127.0.0.1:4840"), LoopConfig())
    obs = {key: np.zeros(size) for key, size in KEYS}
    assert loop.decide(policy.observation_spec.flatten(obs), 1)[0] == CycleStatus.OK
    obs["lidar"][3] = 12.5
    status, action, why = loop.decide(policy.observation_spec.flatten(obs), 2)
    assert status == CycleStatus.INVALID_OBSERVATION and action == loop.safe_action
    assert why == "lidar[3] = 12.5 is above its high 8 (outside [-0.4, 8.4] with the tolerance)"
    obs["lidar"][3], obs["speed"][0] = 1.0, -5.0
    assert loop.decide(policy.observation_spec.flatten(obs), 3)[2] == (
        "speed[0] = -5 is below its low -1 (outside [-1.15, 2.15] with the tolerance)"
    )
    obs["speed"][0], obs["imu"][1] = 0.0, np.nan
    assert loop.decide(policy.observation_spec.flatten(obs), 4)[2] == (
        "observation contains NaN or Inf: imu[1] = nan"
    )


# ------------------------------------------------------------------------------ loading the map
def test_a_per_key_map_loads_in_any_order_and_binds_in_the_manifests(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    imu = ['ns=3;s="DB10"."AccX"', 'ns=3;s="DB10"."YawRate"']
    observation = {"speed": 'ns=3;s="DB10"."Speed"', "imu": imu, "lidar": 'ns=3;s="DB10"."Lidar"'}
    observation["goal"] = {"node": 'ns=3;s="DB10"."Goal"'}  # the {node: ...} form, inside a key
    path.write_text(yaml.safe_dump(_plc_sim_map(observation), sort_keys=False))
    m = load_node_map(path)
    assert m.observation == () and [k for k, _ in m.observation_keys] == ["speed", "imu", "lidar", "goal"]
    assert observation_groups(m, [k for k, _ in KEYS]) == (
        ("lidar", ('ns=3;s="DB10"."Lidar"',)),
        ("imu", tuple(imu)),
        ("goal", ('ns=3;s="DB10"."Goal"',)),
        ("speed", ('ns=3;s="DB10"."Speed"',)),
    )
    with pytest.raises(
        ConfigError, match=r"per key \(speed, imu, lidar, goal\), but the artifact's observation is one Box"
    ):
        observation_groups(m, [])
    # a flat map (the default one too) reads a Dict artifact's keys concatenated
    assert observation_groups(default_node_map(), ["imu"]) == ()


@pytest.mark.parametrize(
    ("observation", "message"),
    [
        ({}, "observation is an empty mapping"),
        ({"lidar x": "ns=2;s=a"}, "observation key 'lidar x' is not a Dict observation key's name"),
        ({1: "ns=2;s=a"}, "observation key 1 is not a Dict observation key's name"),
        ({"lidar": []}, "observation key 'lidar' must be a node reference"),
        ({"lidar": "ns=x;s=a"}, "observation key 'lidar': 'ns=x;s=a' is neither a NodeId"),
        ({"imu": ["ns=2;s=a", "ns=2;q=b"]}, "observation key 'imu'[1]: 'ns=2;q=b' is neither a NodeId"),
    ],
)
def test_a_malformed_per_key_map_is_one_line(
    tmp_path: Path, observation: dict[Any, Any], message: str
) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(_plc_sim_map(observation)))
    with pytest.raises(ConfigError) as info:
        load_node_map(path)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


@pytest.mark.parametrize("isolate", [False, True])
def test_a_manifest_whose_key_sizes_differ_from_the_models_inputs_is_refused_by_key(
    agv_art: Path, tmp_path: Path, isolate: bool
) -> None:
    """A hand-edited manifest whose keys still add up to the model's 30 values (lidar 23 + imu 3 where the
    file takes 24 + 2) would shift every value after lidar by one: refused at load, naming the key, in
    process and in serve's model process."""
    import shutil

    from rl2edge.errors import ManifestError

    art = tmp_path / "art"
    shutil.copytree(agv_art, art)
    manifest = json.loads((art / "manifest.json").read_text())
    keys = {k["name"]: k for k in manifest["observation"]["keys"]}
    keys["lidar"].update(shape=[23], low=keys["lidar"]["low"][:23], high=keys["lidar"]["high"][:23])
    keys["imu"].update(shape=[3], low=[*keys["imu"]["low"], 0.0], high=[*keys["imu"]["high"], 1.0])
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        ManifestError, match="model input 'lidar' takes 24 values; the manifest's key 'lidar' has 23"
    ):
        Policy.load(art, isolate=isolate)


@pytest.mark.integration  # 3 x 10 s: the integration tier, which CI runs too
@pytest.mark.parametrize(
    ("response", "fault"), [("hold", "deadline_miss"), ("ramp", "deadline_miss"), ("hold", "invalid")]
)
def test_injected_faults_get_the_maps_response_in_the_plcs_trace(
    agv_art: Path, tmp_path: Path, response: str, fault: str
) -> None:
    """Deadline misses injected by serve (--inject-faults deadline_miss:0.15), or a failing sensor in plc-sim
    (--invalid-rate 0.15: a NaN published), against plc-sim (lockstep, --trace): each plant step's action
    and status as the PLC saw them. hold: the action of the step before, status fault + 16, for at most
    hold_ms of the fault, then the safe action with the fault's status. ramp: each step moves toward the safe action
    by at most ramp_rate x the time between the plant's steps (+ 10 ms for the gap between serve's write and
    the plant's read), status 3 + 32 until it arrives. Healthy steps: status 0."""
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    trace, summary = tmp_path / "trace.jsonl", tmp_path / "serve.json"
    node_map = {
        **_plc_sim_map(_per_key()),
        "safe_action": [0.0, 0.0],
        "fault_response": {fault: response},
    }
    node_map |= {"hold_ms": 30} if response == "hold" else {"ramp_rate": [1.0, 2.0]}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(node_map))
    code = 3 if fault == "deadline_miss" else 1
    sim_args = ["plc-sim", "--env", AGV, "--endpoint", url, "--seed", str(SEED), "--episodes", "3",
                "--trace", str(trace)]  # fmt: skip
    serve_faults = ["--inject-faults", "deadline_miss:0.15", "--fault-seed", "3"]
    if fault == "invalid":
        sim_args, serve_faults = [*sim_args, "--invalid-rate", "0.15"], []
    with running(sim_args, tmp_path / "sim.log", SIM_ENV) as sim:
        wait_for_server(url)
        serve = _serve(agv_art, url, summary, "--map", str(tmp_path / "map.yaml"), *serve_faults)
        with running(serve, tmp_path / "serve.log") as proc:
            assert sim.wait(timeout=180) == 0, (tmp_path / "sim.log").read_text()
            assert stop(proc) == 0, (tmp_path / "serve.log").read_text()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    statuses = [r["status"] for r in rows]
    assert set(statuses) <= {0, code, code + 16, code + 32}, sorted(set(statuses))
    flagged = code + (16 if response == "hold" else 32)
    assert statuses.count(flagged) >= 5, statuses  # the response ran, not only the safe action
    s = json.loads(summary.read_text())
    assert s[{"hold": "held", "ramp": "ramped"}[response]] >= statuses.count(flagged)
    run_start = None
    for prev, row in itertools.pairwise(rows):
        a, b = np.array(prev["action"]), np.array(row["action"])
        if row["status"] == 0:
            run_start = None
            continue
        run_start = row["t"] if run_start is None else run_start
        if row["status"] == code + 16:  # held: exactly the action the plant had
            assert np.array_equal(b, a), (prev, row)
            assert row["t"] - run_start <= 0.030 + 0.010, (row["t"] - run_start, row)
        elif row["status"] == code + 32:  # ramping: within the rate, toward zero
            bound = np.array([1.0, 2.0]) * (row["t"] - prev["t"] + 0.010)
            assert (np.abs(b - a) <= bound + 1e-6).all() and (np.abs(b) <= np.abs(a) + 1e-6).all(), (
                prev,
                row,
            )
        else:  # the response is spent: the safe action
            assert np.array_equal(b, [0.0, 0.0]), row
