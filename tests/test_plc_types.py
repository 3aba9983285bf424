"""Typed values and node references of the bridge, without a server: counters wrap in the node's own
type, values are range-checked for it, and every NodeId and browse-path form parses (or is refused in
one line naming the key)."""

from __future__ import annotations

import pytest
from asyncua import ua

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge import typed_values as tv
from rl2edge.plc_bridge.noderefs import parse_ref

V = ua.VariantType


@pytest.mark.parametrize(
    ("vtype", "top", "after"),
    [
        (V.Byte, 255, 0),
        (V.SByte, 127, -128),
        (V.Int16, 32767, -32768),
        (V.UInt16, 65535, 0),
        (V.Int32, 2**31 - 1, -(2**31)),
        (V.UInt32, 2**32 - 1, 0),
    ],
)
def test_counters_wrap_in_the_nodes_type(vtype: ua.VariantType, top: int, after: int) -> None:
    assert tv.wrap(top, vtype) == top
    assert tv.wrap(top + 1, vtype) == after
    assert tv.wrap(top + 3, vtype) == after + 2
    tv.encode(tv.wrap(top + 1, vtype), vtype)  # what wraps is always writable


def test_values_are_checked_against_the_type() -> None:
    assert tv.encode(2.0, V.Int16) == 2 and isinstance(tv.encode(2.0, V.Int16), int)
    assert tv.encode(1, V.Boolean) is True
    assert tv.encode(0.25, V.Float) == 0.25
    for value, vtype in [
        (300, V.SByte),
        (-1, V.Byte),
        (70000, V.UInt16),
        (float("nan"), V.Int32),
        (2, V.Boolean),
    ]:
        with pytest.raises(ValueError):
            tv.encode(value, vtype)
    assert tv.range_fits(V.Int16, V.Int32) and tv.range_fits(V.Int32, V.Int32)
    assert not tv.range_fits(V.UInt32, V.Int32) and not tv.range_fits(V.Int32, V.UInt32)


def test_node_references_parse_in_every_form() -> None:
    r = parse_ref("ns=3;s=RL.Obs_0", "observation")
    assert r.node_id([]) == ua.NodeId("RL.Obs_0", 3)
    r = parse_ref("nsu=urn:my-plc;s=RL.Act", "action")
    assert r.node_id(["http://opcfoundation.org/UA/", "urn:other", "urn:my-plc"]) == ua.NodeId("RL.Act", 2)
    assert r.node_id(["http://opcfoundation.org/UA/", "urn:my-plc"]) == ua.NodeId("RL.Act", 1)
    s7 = parse_ref('nsu=http://www.siemens.com/simatic-s7-opcua;s="DB_RL"."ObsSeq"', "observation_seq")
    assert s7.node_id(["", "http://www.siemens.com/simatic-s7-opcua"]) == ua.NodeId('"DB_RL"."ObsSeq"', 1)
    assert parse_ref("i=2258", "status").node_id([]) == ua.NodeId(2258, 0)
    path = parse_ref("nsu=http://x.org/plc/;RL/2:Obs_0", "observation")
    assert path.browse_path(["a", "b", "http://x.org/plc/"]) == [
        ua.QualifiedName("RL", 2),
        ua.QualifiedName("Obs_0", 2),
    ]
    assert parse_ref("2:PLC/2:Observation", "observation").browse_path([]) == [
        ua.QualifiedName("PLC", 2),
        ua.QualifiedName("Observation", 2),
    ]
    with pytest.raises(ConfigError, match="no namespace 'urn:missing'"):
        parse_ref("nsu=urn:missing;s=X", "action").node_id(["http://opcfoundation.org/UA/"])
    for bad in ("", "Observation", "ns=x;s=A", "PLC/Observation"):
        with pytest.raises(ConfigError, match="heartbeat"):
            parse_ref(bad, "heartbeat")
