"""Node-map roles cannot alias (issue 52): no node serve writes (action, action_seq, heartbeat, status) may
be an input (observation or a key of it, observation_seq, episode_start), and no node may have two roles.

Before: `observation_seq:` on the Heartbeat node gave 250 of 250 cycles OK against a plant that never
stepped (serve's own heartbeat moved the "sequence"); the observation on Heartbeat and Status fed the
policy its own outputs, 91 of 100 cycles OK. Now serve refuses such a map in one line, at load for
references written alike, at connect for two spellings of one node (`nsu=` and `ns=`)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.binding import plant_io_of
from rl2edge.plc_bridge.client import BridgeConfig, PlcClient
from rl2edge.plc_bridge.layout import node_id
from rl2edge.plc_bridge.nodemap import load_node_map
from testkit.cli import assert_clean_failure, rl2edge
from testkit.plc import free_port, running, wait_for_server
from testkit.standin_plc import StandinPlc

PLC_SIM = {
    "observation": node_id("Observation"),
    "observation_seq": node_id("ObservationSeq"),
    "action": node_id("Action"),
    "action_seq": node_id("ActionSeq"),
    "heartbeat": node_id("Heartbeat"),
    "status": node_id("Status"),
    "episode_start": node_id("EpisodeStart"),
}


@pytest.mark.parametrize(
    ("changes", "first", "second"),
    [
        ({"observation_seq": node_id("Heartbeat")}, "observation_seq", "heartbeat"),
        ({"observation": [node_id("Heartbeat"), node_id("Status")]}, "observation[0]", "heartbeat"),
        ({"episode_start": node_id("ActionSeq")}, "episode_start", "action_seq"),
        ({"observation": node_id("Action")}, "observation", "action"),
        ({"status": node_id("Heartbeat")}, "heartbeat", "status"),
        ({"observation": {"a": node_id("Observation"), "b": node_id("Observation")}}, "key 'a'", "key 'b'"),
        ({"observation_seq": " ns=2;s=rl2edge.Status "}, "observation_seq", "status"),  # spacing aside
    ],
)
def test_a_node_with_two_roles_is_refused_at_load_naming_both(
    tmp_path: Path, changes: dict[str, Any], first: str, second: str
) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump({**PLC_SIM, **changes}))
    with pytest.raises(ConfigError) as info:
        load_node_map(path)
    message = str(info.value)
    assert "\n" not in message and "are the same node" in message, message
    assert message.index(first) < message.index(second), message


def test_plc_sims_own_layout_and_the_default_map_have_a_node_per_role(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(PLC_SIM))
    assert load_node_map(path).heartbeat == node_id("Heartbeat")


@pytest.mark.integration  # a real plc-sim and serve: the integration tier
def test_serve_refuses_the_heartbeat_as_sequence_number_against_plc_sim(cartpole_all, tmp_path: Path) -> None:
    """The adversary's map, against a real lockstep plc-sim that would never step: serve exits 2 with one
    line before a cycle runs, where it used to report every cycle OK."""
    port = free_port()
    url = f"opc.tcp://127.0.0.1:{port}"
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump({**PLC_SIM, "observation_seq": node_id("Heartbeat")}))
    sim = ["plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "lockstep"]
    with running(sim, tmp_path / "sim.log"):
        wait_for_server(url)
        t0 = time.monotonic()
        proc = rl2edge("serve", cartpole_all[1] / "int8", "--endpoint", url, "--map", path, "--cycles", "250")
    assert_clean_failure(proc, "observation_seq and heartbeat are the same node", "serve writes heartbeat")
    assert len(proc.stderr.strip().splitlines()) == 1 and time.monotonic() - t0 < 30, proc.stderr


@pytest.mark.parametrize("spelling", ["ns= for nsu=", "browse path"])
def test_two_spellings_of_one_node_are_caught_at_connect_on_the_node_opcua_standin(
    cartpole_all, tmp_path: Path, spelling: str
) -> None:
    """`nsu=<uri>;s=RL.Heartbeat` and `ns=<k>;s=RL.Heartbeat` differ as text, and so does the browse path
    `nsu=<uri>;RL/nsu=<uri>;Heartbeat`; resolved on another stack's server they are one node, and connecting
    refuses the map. (The browse path had passed: the node it resolves to holds a plain str identifier, a
    parsed one a ua.String, and the two were compared by type name; serve's own heartbeat then served as
    observation_seq, and a plant that never stepped looked fresh.)"""
    from rl2edge.runtime import Policy

    policy = Policy.load(cartpole_all[1] / "fp32")
    with StandinPlc(None, obs_dim=4, act_dim=1, layout="array", workdir=tmp_path / "plc") as plc:
        m = plc.node_map(nsu=True)
        uri = plc.namespace_uri
        if spelling == "browse path":
            m["heartbeat"] = plc.node_id("Heartbeat", nsu=False)
            m["observation_seq"] = f"nsu={uri};RL/nsu={uri};Heartbeat"
        else:
            m["observation_seq"] = plc.node_id("Heartbeat", nsu=False)
        path = tmp_path / "map.yaml"
        path.write_text(yaml.safe_dump(m))
        node_map = load_node_map(path)  # the text differs: load cannot tell

        async def connect() -> None:
            async with PlcClient(BridgeConfig(plc.endpoint, node_map=node_map), plant_io_of(policy)):
                pass

        with pytest.raises(ConfigError) as info:
            asyncio.run(connect())
    message = str(info.value)
    assert "observation_seq and heartbeat are the same node" in message and "\n" not in message, message
