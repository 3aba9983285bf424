"""The node-opcua PLC stand-in itself (testkit/standin_plc.py + tests/opcua_standin/server.mjs), checked
with a plain asyncua Client: node layout and types as a PLC declares them, refused writes, qualities,
namespace index, the lockstep handshake, security."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from asyncua import Client, ua
from asyncua.crypto import security_policies

from rl2edge.plc_bridge.security import make_certificate
from testkit.plc import free_port
from testkit.standin_plc import StandinError, StandinPlc

pytestmark = pytest.mark.timeout(120)

A = ua.AttributeIds


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def scalar_plc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinPlc]:
    """No plant: just the data block, with the initial values a long-running PLC might have."""
    with StandinPlc(
        None,
        obs_dim=3,
        act_dim=2,
        initial={"ObsSeq": 2147483647, "Heartbeat": 65530},
        workdir=tmp_path_factory.mktemp("standin"),
        port=free_port(),
    ) as plc:
        yield plc


async def _attrs(url: str, node_id: str, *attrs: ua.AttributeIds) -> list[Any]:
    async with Client(url) as c:
        node = c.get_node(node_id)
        return [(await node.read_attribute(a)).Value.Value for a in attrs]


async def _write(url: str, writes: list[tuple[str, ua.Variant]]) -> list[str]:
    """One Write request with all of `writes`, in its own session; the per-node status names."""
    async with Client(url) as c:
        return await _write_in(c, writes)


def test_scalar_layout_types_and_access(scalar_plc: StandinPlc) -> None:
    plc = scalar_plc
    ns = plc.namespace_index
    assert plc.endpoint.startswith("opc.tcp://127.0.0.1:")
    assert plc.namespace_uri == "urn:rl2edge:test-plc"
    expected = {
        "Obs_0": 10,  # Float
        "Obs_2": 10,
        "ObsSeq": 6,  # Int32
        "Act_0": 4,  # Int16
        "Act_1": 4,
        "ActSeq": 6,
        "Heartbeat": 5,  # UInt16
        "Status": 4,
        "EpisodeStart": 1,  # Boolean
    }

    async def check() -> dict[str, Any]:
        async with Client(plc.endpoint) as c:
            endpoints = await c.get_endpoints()
            assert {(e.SecurityMode, e.SecurityPolicyUri) for e in endpoints} == {
                (ua.MessageSecurityMode.None_, "http://opcfoundation.org/UA/SecurityPolicy#None")
            }
            rl = await c.nodes.objects.get_child(f"{ns}:RL")
            assert rl.nodeid == ua.NodeId("RL", ns)
            children = {(await n.read_browse_name()).Name: n for n in await rl.get_children()}
            assert set(children) == {
                "Obs_0",
                "Obs_1",
                "Obs_2",
                "ObsSeq",
                "Act_0",
                "Act_1",
                "ActSeq",
                "Heartbeat",
                "Status",
                "EpisodeStart",
            }
            out = {}
            for name, node in children.items():
                assert node.nodeid == ua.NodeId(f"RL.{name}", ns)
                assert (await node.read_browse_name()) == ua.QualifiedName(name, ns)
                dtype, rank, dims, access, user_access = [
                    (await node.read_attribute(a)).Value.Value
                    for a in (A.DataType, A.ValueRank, A.ArrayDimensions, A.AccessLevel, A.UserAccessLevel)
                ]
                out[name] = (dtype, rank, dims, access, user_access, await node.read_value())
            return out

    got = run(check())
    for name, type_id in expected.items():
        assert got[name][0] == ua.NodeId(type_id, 0), name
    for name, (_, rank, dims, access, user_access, _) in got.items():
        assert rank == -1 and not dims, name
        writable = name.startswith(("Act", "Heartbeat", "Status"))
        want = 3 if writable else 1  # CurrentRead | CurrentWrite, or CurrentRead
        assert (access, user_access) == (want, want), name
    assert got["ObsSeq"][5] == 2147483647 and got["Heartbeat"][5] == 65530 and got["Act_0"][5] == 0


def test_refused_writes(scalar_plc: StandinPlc) -> None:
    plc = scalar_plc
    url = plc.endpoint
    act0 = plc.node_id("Act_0")
    results = run(
        _write(
            url,
            [
                (act0, ua.Variant([1, 2], ua.VariantType.Int16)),  # an array to a scalar
                (act0, ua.Variant(1, ua.VariantType.Int32)),  # Int32 to Int16
                (act0, ua.Variant(1.0, ua.VariantType.Double)),
                (plc.node_id("Obs_0"), ua.Variant(1.0, ua.VariantType.Float)),  # read-only
                (plc.node_id("Status"), ua.Variant(7, ua.VariantType.Int16)),
            ],
        )
    )
    assert results == ["BadTypeMismatch", "BadTypeMismatch", "BadTypeMismatch", "BadNotWritable", "Good"]
    values = plc.get()
    assert values["Act_0"] == 0 and values["Obs_0"] == 0 and values["Status"] == 7
    stats = plc.stats()
    assert stats["writes"]["rejected"] >= 4 and stats["writes"]["ok"] >= 1


def test_reject_command(scalar_plc: StandinPlc) -> None:
    plc = scalar_plc
    act1 = plc.node_id("Act_1")
    plc.reject("Act_1", "BadOutOfRange")
    try:
        results = run(
            _write(
                plc.endpoint,
                [
                    (act1, ua.Variant(5, ua.VariantType.Int16)),
                    (plc.node_id("Heartbeat"), ua.Variant(9, ua.VariantType.UInt16)),
                ],
            )
        )
        assert results == ["BadOutOfRange", "Good"]
        assert plc.get()["Act_1"] == 0 and plc.get()["Heartbeat"] == 9
    finally:
        plc.reject("Act_1", None)
    assert run(_write(plc.endpoint, [(act1, ua.Variant(5, ua.VariantType.Int16))])) == ["Good"]
    assert plc.get()["Act_1"] == 5
    with pytest.raises(StandinError, match="unknown status"):
        plc.reject("Act_1", "BadNoSuchThing")
    with pytest.raises(StandinError, match="unknown node"):
        plc.set("Nope", 1)


def test_set_with_bad_status(scalar_plc: StandinPlc) -> None:
    plc = scalar_plc

    async def read(name: str) -> ua.DataValue:
        async with Client(plc.endpoint) as c:
            return await c.get_node(plc.node_id(name)).read_data_value(raise_on_bad_status=False)

    assert plc.set("Obs_1", 1.5, status="BadSensorFailure") == 1.5
    assert run(read("Obs_1")).StatusCode.name == "BadSensorFailure"
    plc.set("Obs_1", status="UncertainLastUsableValue")  # value kept
    dv = run(read("Obs_1"))
    assert dv.StatusCode.name == "UncertainLastUsableValue" and dv.Value.Value == 1.5
    plc.set("Obs_1", 0.25)
    dv = run(read("Obs_1"))
    assert dv.StatusCode.is_good() and dv.Value.Value == 0.25


def test_observe_wraps_like_the_plc_type(scalar_plc: StandinPlc, tmp_path: Path) -> None:
    assert scalar_plc.observe([1.0, 2.0, 3.0]) == -2147483648  # DINT 2147483647 + 1
    assert scalar_plc.observe([1.0, 2.0, 3.0]) == -2147483647
    types = {"ObsSeq": "UInt16", "Obs": "Int16"}
    with StandinPlc(
        None, obs_dim=2, types=types, initial={"ObsSeq": 65535}, workdir=tmp_path, port=free_port()
    ) as plc:
        assert plc.observe([1.6, 1e9]) == 0
        assert plc.get()["Obs_0"] == 2 and plc.get()["Obs_1"] == 32767  # rounded, saturated
        assert run(_attrs(plc.endpoint, plc.node_id("ObsSeq"), A.DataType))[0] == ua.NodeId(5, 0)


TYPE_IDS = {
    "Boolean": 1,
    "SByte": 2,
    "Byte": 3,
    "Int16": 4,
    "UInt16": 5,
    "Int32": 6,
    "UInt32": 7,
    "Int64": 8,
    "UInt64": 9,
    "Float": 10,
    "Double": 11,
}


def test_every_builtin_type(tmp_path: Path) -> None:
    wide = {
        "Obs": "Double",
        "ObsSeq": "Int64",
        "Act": "SByte",
        "ActSeq": "UInt64",
        "Heartbeat": "Byte",
        "Status": "UInt32",
    }
    with StandinPlc(
        None, obs_dim=1, types=wide, initial={"ObsSeq": 2**63 - 1}, workdir=tmp_path / "a", port=free_port()
    ) as plc:
        for kind, type_name in wide.items():
            name = f"{kind}_0" if kind in ("Obs", "Act") else kind
            assert run(_attrs(plc.endpoint, plc.node_id(name), A.DataType))[0] == ua.NodeId(
                TYPE_IDS[type_name], 0
            )
        assert plc.observe([0.1]) == -(2**63)  # LINT wraps
        results = run(
            _write(
                plc.endpoint,
                [
                    (plc.node_id("Act_0"), ua.Variant(-5, ua.VariantType.SByte)),
                    (plc.node_id("ActSeq"), ua.Variant(2**64 - 1, ua.VariantType.UInt64)),
                    (plc.node_id("Heartbeat"), ua.Variant(255, ua.VariantType.Byte)),
                    (plc.node_id("Status"), ua.Variant(4000000000, ua.VariantType.UInt32)),
                ],
            )
        )
        assert results == ["Good"] * 4
        values = plc.get()
        assert values["Obs_0"] == 0.1 and values["Act_0"] == -5 and values["ActSeq"] == 2**64 - 1
        assert values["Heartbeat"] == 255 and values["Status"] == 4000000000

    bits = {"Obs": "Boolean", "ObsSeq": "Boolean", "Act": "Float", "ActSeq": "Boolean"}
    with StandinPlc(None, obs_dim=2, types=bits, workdir=tmp_path / "b", port=free_port()) as plc:
        assert run(_attrs(plc.endpoint, plc.node_id("Obs_1"), A.DataType))[0] == ua.NodeId(1, 0)
        assert plc.observe([0.0, 2.0]) is True  # a toggle bit as the sequence
        assert plc.get()["Obs_1"] is True
        results = run(
            _write(
                plc.endpoint,
                [
                    (plc.node_id("Act_0"), ua.Variant(0.5, ua.VariantType.Float)),
                    (plc.node_id("ActSeq"), ua.Variant(True, ua.VariantType.Boolean)),
                ],
            )
        )
        assert results == ["Good", "Good"]
        assert plc.stats()["steps"] == 1
        assert plc.observe([1.0, 0.0]) is False


def test_missing_node_opcua_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import testkit.standin_plc as standin

    monkeypatch.setattr(standin, "_node_opcua_installed", lambda: False)
    with pytest.raises(StandinError, match=r"npm ci"), StandinPlc(None, workdir=tmp_path):
        pass


def test_array_layout(tmp_path: Path) -> None:
    with StandinPlc(None, layout="array", obs_dim=4, act_dim=2, workdir=tmp_path, port=free_port()) as plc:
        obs = run(
            _attrs(
                plc.endpoint, plc.node_id("Obs"), A.DataType, A.ValueRank, A.ArrayDimensions, A.AccessLevel
            )
        )
        act = run(
            _attrs(
                plc.endpoint, plc.node_id("Act"), A.DataType, A.ValueRank, A.ArrayDimensions, A.AccessLevel
            )
        )
        seq = run(_attrs(plc.endpoint, plc.node_id("ObsSeq"), A.ValueRank))
        assert obs == [ua.NodeId(10, 0), 1, [4], 1]
        assert act == [ua.NodeId(4, 0), 1, [2], 3]
        assert seq == [-1]
        results = run(
            _write(
                plc.endpoint,
                [
                    (plc.node_id("Act"), ua.Variant([1, 2, 3], ua.VariantType.Int16)),  # wrong length
                    (plc.node_id("Act"), ua.Variant(1, ua.VariantType.Int16)),  # a scalar to an array
                    (plc.node_id("Act"), ua.Variant([1.0, 2.0], ua.VariantType.Float)),  # wrong type
                    (plc.node_id("Act"), ua.Variant([-3, 4], ua.VariantType.Int16)),
                ],
            )
        )
        assert results == ["BadTypeMismatch", "BadTypeMismatch", "BadTypeMismatch", "Good"]
        plc.observe([0.5, 1, 2, 3])
        values = plc.get()
        assert values["Act"] == [-3, 4] and values["Obs"] == [0.5, 1, 2, 3] and values["ObsSeq"] == 1


def test_namespace_index_moves_with_extra_namespaces(tmp_path: Path) -> None:
    with StandinPlc(None, extra_namespaces=3, workdir=tmp_path, port=free_port()) as plc:
        assert plc.namespace_index == 5  # 0: OPC UA, 1: the server's own, 2..4: dummies

        async def check() -> None:
            async with Client(plc.endpoint) as c:
                namespaces = await c.get_namespace_array()
                assert namespaces[2:6] == ["urn:dummy:0", "urn:dummy:1", "urn:dummy:2", plc.namespace_uri]
                node = c.get_node(ua.NodeId("RL.ObsSeq", namespaces.index(plc.namespace_uri)))
                assert await node.read_value() == 0

        run(check())
        assert plc.node_id("ActSeq", nsu=True) == "nsu=urn:rl2edge:test-plc;s=RL.ActSeq"
        assert plc.node_map()["action"] == ["nsu=urn:rl2edge:test-plc;s=RL.Act_0"]


def _cartpole_return(seed: int, actions: list[int]) -> float:
    """What a CartPole episode returns when played with `actions`, then 0 forever."""
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    total, done, t = 0.0, False, 0
    while not done:
        _, r, term, trunc, _ = env.step(actions[t] if t < len(actions) else 0)
        total, done, t = total + float(r), term or trunc, t + 1
    return total


async def _write_in(c: Client, writes: list[tuple[str, ua.Variant]]) -> list[str]:
    params = ua.WriteParameters()
    params.NodesToWrite = [
        ua.WriteValue(NodeId=ua.NodeId.from_string(nid), AttributeId=A.Value, Value=ua.DataValue(v))
        for nid, v in writes
    ]
    return [r.name for r in await c.uaclient.write(params)]


async def _handshake(c: Client, plc: StandinPlc, action: int, *, split: bool = True) -> list[str]:
    """The client's side of one cycle: read ObsSeq, write the action (+ Status), then ActSeq."""
    seq = await c.get_node(plc.node_id("ObsSeq")).read_value()
    act = [
        (plc.node_id("Act_0"), ua.Variant(action, ua.VariantType.Int16)),
        (plc.node_id("Status"), ua.Variant(0, ua.VariantType.Int16)),
    ]
    ack = [(plc.node_id("ActSeq"), ua.Variant(seq, ua.VariantType.Int32))]
    if not split:
        return await _write_in(c, act + ack)
    return await _write_in(c, act) + await _write_in(c, ack)


async def _wait_steps(plc: StandinPlc, n: int) -> None:
    for _ in range(1000):  # 5 s
        if plc.steps >= n:
            return
        await asyncio.sleep(0.005)


def test_lockstep_handshake_steps_once(tmp_path: Path) -> None:
    with StandinPlc("CartPole-v1", seed=3, episodes=2, workdir=tmp_path, port=free_port()) as plc:
        assert plc.get()["ObsSeq"] == 1 and plc.steps == 0  # the first observation, published at start

        async def play() -> None:
            async with Client(plc.endpoint) as c:
                assert await _handshake(c, plc, 1) == ["Good", "Good", "Good"]
                await _wait_steps(plc, 1)
                assert plc.steps == 1 and plc.get()["ObsSeq"] == 2

                # ActSeq again for an observation already answered: no second step.
                assert await _write_in(c, [(plc.node_id("ActSeq"), ua.Variant(1, ua.VariantType.Int32))]) == [
                    "Good"
                ]
                # The answer refused: no step.
                plc.reject("ActSeq", "BadOutOfRange")
                assert await _handshake(c, plc, 1) == ["Good", "Good", "BadOutOfRange"]
                plc.reject("ActSeq", None)
                await asyncio.sleep(0.05)
                assert plc.steps == 1 and plc.get()["ObsSeq"] == 2 and plc.stats()["steps"] == 1

                # Action and answer in one request work too; then play both episodes out with action 0.
                assert await _handshake(c, plc, 0, split=False) == ["Good", "Good", "Good"]
                await _wait_steps(plc, 2)
                assert plc.steps == 2
                while not plc.finished and plc.steps < 500:
                    n = plc.steps
                    await _handshake(c, plc, 0)
                    await _wait_steps(plc, n + 1)

        run(play())
        returns = plc.wait_episodes(10)
    # Episode i was reset with seed 3+i; the first got action 1, then 1 (refused, not stepped), then 0s.
    assert returns == [_cartpole_return(3, [1]), _cartpole_return(4, [])]
    assert plc.steps == sum(returns)


def test_security_trusted_and_untrusted_client(tmp_path: Path) -> None:
    pki = tmp_path / "certs"
    pki.mkdir()
    certs = {
        n: make_certificate(pki, n, f"urn:rl2edge:{n}", "127.0.0.1") for n in ("plc", "client", "intruder")
    }
    plc_cert, plc_key = certs["plc"]

    async def connect(who: str) -> int:
        cert, key = certs[who]
        c = Client(plc.endpoint, timeout=5)
        c.application_uri = f"urn:rl2edge:{who}"
        await c.set_security(
            security_policies.SecurityPolicyBasic256Sha256,
            certificate=str(cert),
            private_key=str(key),
            server_certificate=str(plc_cert),
            mode=ua.MessageSecurityMode.SignAndEncrypt,
        )
        async with c:
            return await c.get_node(plc.node_id("ObsSeq")).read_value()

    with StandinPlc(
        None,
        security="sign_and_encrypt",
        certificate=plc_cert,
        private_key=plc_key,
        trusted=[certs["client"][0]],
        workdir=tmp_path / "w",
        port=free_port(),
    ) as plc:
        assert run(connect("client")) == 0
        # node-opcua answers the OpenSecureChannel with an ERR message (BadSecurityChecksFailed, which hides
        # the reason); asyncua 2.1 fails to parse it and raises a bare AssertionError.
        with pytest.raises((AssertionError, ConnectionError, ua.UaError, TimeoutError)):
            run(connect("intruder"))
        assert plc.stats()["sessions"] == 0
        rejected = [p.name for p in (tmp_path / "w" / "pki" / "rejected").iterdir()]
        assert len(rejected) == 1 and rejected[0].startswith("intruder"), rejected
        log = (tmp_path / "w" / "standin.log").read_text()
        assert "BadCertificateUntrusted" in log


class Handler:
    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        pass


def test_publishing_interval_and_stats(tmp_path: Path) -> None:
    with StandinPlc(None, workdir=tmp_path, port=free_port()) as plc:

        async def subscribe() -> dict[str, Any]:
            async with Client(plc.endpoint) as c:
                sub = await c.create_subscription(20, Handler())
                await sub.subscribe_data_change(
                    [c.get_node(plc.node_id("ObsSeq")), c.get_node(plc.node_id("Obs_0"))]
                )
                return plc.stats()

        stats = run(subscribe())
        assert stats["sessions"] == 1 and stats["subscriptions"] == 1 and stats["monitored_items"] == 2
        assert stats["revised_publishing_intervals"] == [50]  # node-opcua's own minimum
    with StandinPlc(None, workdir=tmp_path / "fast", port=free_port(), min_publishing_interval_ms=10) as plc:

        async def revised() -> float:
            async with Client(plc.endpoint) as c:
                return (await c.create_subscription(20, Handler())).parameters.RequestedPublishingInterval

        run(revised())
        assert plc.stats()["revised_publishing_intervals"] == [20]


def test_node_death_is_reported(tmp_path: Path) -> None:
    plc = StandinPlc(None, workdir=tmp_path, port=free_port())
    with plc:
        plc._proc.kill()  # type: ignore[union-attr]
        plc._proc.wait()  # type: ignore[union-attr]
        with pytest.raises(StandinError, match=r"gone|died"):
            plc.get()
    assert plc.returncode is not None
