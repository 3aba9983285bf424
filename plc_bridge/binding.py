"""Connect-time binding: the node map and the server's nodes -> typed nodes, or one ConfigError line.

`bind` resolves each reference of the node map (namespace URIs through the server's NamespaceArray,
browse paths through the server; a per-key observation in the manifest's key order), reads each node's
DataType, ValueRank, ArrayDimensions, UserAccessLevel and Value in one Read, and refuses a map that
cannot carry the policy's observation and action (`check_fit`, each key of a per-key map on its own). What comes out, `BoundNodes`, is what the per-cycle client (plc_bridge.client) writes and
reads: each node's builtin type and shape, fixed for the session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from asyncua import Client, ua
from asyncua.common.ua_utils import data_type_to_variant_type

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge import typed_values as tv
from rl2edge.plc_bridge.nodemap import NodeMap, check_distinct_roles, key_roles, observation_groups
from rl2edge.plc_bridge.noderefs import NodeRef, identity, parse_ref
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.policy import Policy

_logger = logging.getLogger(__name__)

_ATTRS = (
    ua.AttributeIds.DataType,
    ua.AttributeIds.ValueRank,
    ua.AttributeIds.ArrayDimensions,
    ua.AttributeIds.UserAccessLevel,
    ua.AttributeIds.Value,
)
_SCALAR_RANKS = (-1,)  # ValueRank: -1 scalar; 1 one dimension; 0, -2, -3: the server does not say


@dataclass(frozen=True)
class PlantIo:
    """What the policy reads and writes, to check the node map against the server's nodes."""

    obs_size: int
    action_size: int
    discrete: bool
    action_low: tuple[float, ...]
    """Discrete: (first index,); Box: the lower bounds."""
    action_high: tuple[float, ...]
    obs_keys: tuple[tuple[str, int], ...] = ()
    """A Dict observation's (key, number of values) in the manifest's order; () for a Box."""
    integer: bool = False
    """Integer actions: a Discrete index, or one index per component of a MultiDiscrete/MultiBinary one
    (action_low/high: each component's first and last index)."""


def plant_io_of(policy: Policy) -> PlantIo:
    """The PlantIo of a runtime Policy, from its typed specs."""
    obs, act = policy.observation_spec, policy.action_spec
    keys = tuple((k.name, k.size) for k in obs.keys)
    if act.discrete:
        lo, hi = act.index_range
        return PlantIo(obs.size, 1, True, (float(lo),), (float(hi),), keys, integer=True)
    low, high = policy.action_low.reshape(-1), policy.action_high.reshape(-1)
    return PlantIo(
        obs.size,
        int(low.size),
        False,
        tuple(float(v) for v in low),
        tuple(float(v) for v in high),
        keys,
        integer=act.multi_discrete,
    )


@dataclass(frozen=True)
class BoundNode:
    role: str
    """`observation[2]`, `observation key 'imu'[1]`, `action`, `heartbeat`...: what messages call it."""
    ref: str
    node_id: ua.NodeId
    vtype: ua.VariantType
    length: int | None
    """None: a scalar; else an array of this many values."""

    def variant(self, value: Any) -> ua.Variant:
        if self.length is None:
            return ua.Variant(tv.encode(value, self.vtype), self.vtype)
        return ua.Variant([tv.encode(v, self.vtype) for v in value], self.vtype)


@dataclass(frozen=True)
class BoundNodes:
    """The node map bound to one server's nodes: what a session reads and writes each cycle."""

    observation: tuple[BoundNode, ...]
    """Read in this order, their values concatenated: the policy's observation."""
    observation_seq: BoundNode
    action: tuple[BoundNode, ...]
    action_seq: BoundNode
    heartbeat: BoundNode
    status: BoundNode
    heartbeat_value: int
    """The PLC's heartbeat at connect: continued from there, so a restart of serve never moves it back."""
    observation_keys: tuple[tuple[str, tuple[BoundNode, ...]], ...] = ()
    """A per-key map: each key's nodes (consecutive in `observation`), in the manifest's key order."""
    episode_start: BoundNode | None = None
    """The PLC's episode-start flag (a Boolean or integer scalar), read with the observation; None: unmapped."""

    def describe(self) -> str:
        obs = (
            ", ".join(f"{key} {_layout(nodes)}" for key, nodes in self.observation_keys)
            if self.observation_keys
            else _layout(self.observation)
        )
        return (
            f"observation {obs}, action {_layout(self.action)}, sequence "
            f"{self.observation_seq.vtype.name}/{self.action_seq.vtype.name}, heartbeat "
            f"{self.heartbeat.vtype.name}, status {self.status.vtype.name}"
        )


async def bind(client: Client, node_map: NodeMap, io: PlantIo) -> BoundNodes:
    """The node map's nodes on the server `client` is connected to, typed; ConfigError if they do not
    exist, cannot be read or written by this user, or cannot carry `io`."""
    m = node_map
    groups = observation_groups(m, [name for name, _ in io.obs_keys])
    observation_roles = (
        [role for name, refs in groups for role in key_roles(name, refs)]
        if groups
        else [
            (f"observation[{i}]" if len(m.observation) > 1 else "observation", r)
            for i, r in enumerate(m.observation)
        ]
    )
    namespaces = await client.get_namespace_array()
    roles: list[tuple[str, str]] = [
        *observation_roles,
        ("observation_seq", m.observation_seq),
        *((f"action[{i}]" if len(m.action) > 1 else "action", r) for i, r in enumerate(m.action)),
        ("action_seq", m.action_seq),
        ("heartbeat", m.heartbeat),
        ("status", m.status),
        *((("episode_start", m.episode_start),) if m.episode_start is not None else ()),
    ]
    ids = [await _node_id(client, parse_ref(ref, role), namespaces, role) for role, ref in roles]
    # the load-time check compares references as written; here `nsu=` and `ns=` forms and browse paths
    # are resolved, so two spellings of one node are caught too
    check_distinct_roles([(role, identity(i), ref) for (role, ref), i in zip(roles, ids, strict=True)])
    params = ua.ReadParameters()
    params.NodesToRead = [ua.ReadValueId(NodeId=i, AttributeId=a) for i in ids for a in _ATTRS]
    results = await client.uaclient.read(params)
    bound: list[BoundNode] = []
    for k, ((role, ref), node_id) in enumerate(zip(roles, ids, strict=True)):
        dtype, rank, dims, access, value = results[k * len(_ATTRS) : (k + 1) * len(_ATTRS)]
        if not dtype.StatusCode.is_good():
            raise ConfigError(
                f"{role} {ref}: the server has no such node ({dtype.StatusCode.name}); correct the node map"
            )
        bound.append(await _typed(client, role, ref, node_id, dtype, rank, dims, access, value))
    n_obs, n_act = len(observation_roles), len(m.action)
    hb = results[(n_obs + 1 + n_act + 1) * len(_ATTRS) + 4]
    current = hb.Value.Value if hb.StatusCode.is_good() and hb.Value is not None else 0
    action_seq, heartbeat, status = bound[n_obs + 1 + n_act : n_obs + 1 + n_act + 3]
    episode_start = bound[-1] if m.episode_start is not None else None
    if episode_start is not None and (
        episode_start.length is not None or episode_start.vtype in tv.FLOAT_TYPES
    ):
        raise ConfigError(
            f"episode_start {episode_start.ref}: a {episode_start.vtype.name}"
            f"{'' if episode_start.length is None else ' array'}; declare a Boolean (or integer) scalar the PLC "
            "sets with an episode's first observation"
        )
    nodes = BoundNodes(
        observation=tuple(bound[:n_obs]),
        observation_seq=bound[n_obs],
        action=tuple(bound[n_obs + 1 : n_obs + 1 + n_act]),
        action_seq=action_seq,
        heartbeat=heartbeat,
        status=status,
        heartbeat_value=int(current) if isinstance(current, int) and not isinstance(current, bool) else 0,
        observation_keys=_by_key(groups, bound[:n_obs]),
        episode_start=episode_start,
    )
    check_fit(nodes, io)
    return nodes


def _by_key(
    groups: tuple[tuple[str, tuple[str, ...]], ...], observation: list[BoundNode]
) -> tuple[tuple[str, tuple[BoundNode, ...]], ...]:
    out, start = [], 0
    for name, refs in groups:
        out.append((name, tuple(observation[start : start + len(refs)])))
        start += len(refs)
    return tuple(out)


async def _node_id(client: Client, ref: NodeRef, namespaces: list[str], role: str) -> ua.NodeId:
    if ref.identifier is not None:
        return ref.node_id(namespaces)
    try:
        node = await client.nodes.objects.get_child(ref.browse_path(namespaces))
    except ua.UaStatusCodeError as exc:
        raise ConfigError(
            f"{role} {ref.text}: no such browse path under the Objects folder ({type(exc).__name__}); "
            "browse the server (e.g. with UaExpert) and correct the node map"
        ) from None
    return node.nodeid


async def _typed(
    client: Client,
    role: str,
    ref: str,
    node_id: ua.NodeId,
    dtype: ua.DataValue,
    rank: ua.DataValue,
    dims: ua.DataValue,
    access: ua.DataValue,
    value: ua.DataValue,
) -> BoundNode:
    """What the server says the node is: its builtin type and its shape."""
    dt = dtype.Value.Value if dtype.Value is not None else None
    vtype = ua.datatype_to_varianttype(dt) if isinstance(dt, ua.NodeId) else None
    if isinstance(dt, ua.NodeId) and vtype not in tv.SUPPORTED:
        # a subtype (Duration is a Double, an enumeration an Int32): the server knows its builtin type
        try:
            vtype = await data_type_to_variant_type(client.get_node(dt))
        except Exception:
            vtype = None
    if vtype not in tv.SUPPORTED:
        raise ConfigError(
            f"{role} {ref}: DataType {dt} is not one of {', '.join(sorted(t.name for t in tv.SUPPORTED))}; "
            "map a numeric or Boolean variable"
        )
    writes = role.startswith(("action", "heartbeat", "status"))
    level = access.Value.Value if access.StatusCode.is_good() and access.Value is not None else None
    if isinstance(level, int):
        need = ua.AccessLevel.CurrentWrite if writes else ua.AccessLevel.CurrentRead
        if not level & (1 << need.value):
            raise ConfigError(
                f"{role} {ref}: the server does not let this user {'write' if writes else 'read'} it "
                f"(UserAccessLevel {level}); make it {'writable' if writes else 'readable'} in the PLC's "
                "OPC UA interface or map another node"
            )
    r = rank.Value.Value if rank.StatusCode.is_good() and rank.Value is not None else -2
    length: int | None
    if r in _SCALAR_RANKS:
        length = None
    elif r == 1 or r in (0, -2, -3):
        d = dims.Value.Value if dims.StatusCode.is_good() and dims.Value is not None else None
        current = value.Value.Value if value.StatusCode.is_good() and value.Value is not None else None
        if d and d[0] > 0:
            length = int(d[0])
        elif isinstance(current, list):
            length = len(current)
        elif r == 1:
            raise ConfigError(
                f"{role} {ref}: a one-dimensional array of unknown length (no ArrayDimensions, no value)"
            )
        else:
            length = None  # "scalar or array" with a scalar value in it: a scalar
    else:
        raise ConfigError(f"{role} {ref}: ValueRank {r} (a {r}-dimensional array) is not supported")
    return BoundNode(role, ref, node_id, vtype, length)


def check_fit(nodes: BoundNodes, io: PlantIo) -> None:
    """Refuse, in one line, a map that cannot carry the policy's observation and action."""
    if nodes.observation_keys:
        sizes = dict(io.obs_keys)
        for key, group in nodes.observation_keys:
            _check_key(key, group, sizes[key])
    else:
        size = _size(nodes.observation, "observation", io.obs_size)
        if size != io.obs_size:
            raise ConfigError(
                f"the observation nodes hold {size} values ({_layout(nodes.observation)}); the policy reads "
                f"{io.obs_size}: map {io.obs_size} scalar nodes or one array node of length {io.obs_size}"
            )
    size = _size(nodes.action, "action", io.action_size)
    if size != io.action_size:
        raise ConfigError(
            f"the action nodes hold {size} values ({_layout(nodes.action)}); the policy writes "
            f"{io.action_size}: map {io.action_size} scalar nodes or one array node of length {io.action_size}"
        )
    for i, b in enumerate(nodes.action):
        lo, hi = tv.value_range(b.vtype)
        if io.discrete or io.integer:
            # the indices this node holds: one component's (a scalar per component), or all of them (an array)
            one = b.length is None and len(nodes.action) == io.action_size
            first = io.action_low[i] if one else min(io.action_low)
            last = io.action_high[i] if one else max(io.action_high)
            if b.vtype in tv.FLOAT_TYPES:
                continue
            if not (lo <= first and last <= hi):
                raise ConfigError(
                    f"{b.role} {b.ref}: a {b.vtype.name} cannot hold the action indices {first:g}..{last:g}; "
                    "declare a wider integer type"
                )
        elif b.vtype == tv.V.Boolean:
            raise ConfigError(
                f"{b.role} {b.ref}: a continuous action cannot be written to a Boolean; declare a REAL (Float)"
            )
        elif b.vtype not in tv.FLOAT_TYPES:
            if min(io.action_low) < lo or max(io.action_high) > hi:
                raise ConfigError(
                    f"{b.role} {b.ref}: a {b.vtype.name} cannot hold the action bounds "
                    f"[{min(io.action_low):g}, {max(io.action_high):g}]; declare a REAL (Float)"
                )
            _logger.warning("%s %s is a %s: the continuous action is rounded", b.role, b.ref, b.vtype.name)
    for b in (nodes.observation_seq, nodes.action_seq, nodes.heartbeat, nodes.status):
        if b.length is not None or b.vtype not in tv.INT_RANGES:
            raise ConfigError(
                f"{b.role} {b.ref}: must be an integer scalar (e.g. DINT/Int32, UINT/UInt16), "
                f"not a {b.vtype.name}{'' if b.length is None else ' array'}"
            )
    if not tv.range_fits(nodes.observation_seq.vtype, nodes.action_seq.vtype):
        raise ConfigError(
            f"action_seq {nodes.action_seq.ref} is a {nodes.action_seq.vtype.name} and cannot echo every value "
            f"of observation_seq {nodes.observation_seq.ref}, a {nodes.observation_seq.vtype.name}: declare both "
            "with the same type"
        )
    if tv.value_range(nodes.status.vtype)[1] < max(CycleStatus):
        raise ConfigError(
            f"status {nodes.status.ref}: a {nodes.status.vtype.name} cannot hold the status codes"
        )


def _check_key(key: str, nodes: tuple[BoundNode, ...], expected: int) -> None:
    """One key's nodes hold that key's values: one array of its length, one scalar for a one-value key, or
    that many scalars."""
    size = _size(nodes, f"observation key {key!r}", expected)
    if size == expected:
        return
    if len(nodes) == 1 and nodes[0].length is not None:
        raise ConfigError(
            f"observation key {key!r}: node {nodes[0].ref} holds {size} values, the artifact's key {expected}"
        )
    if len(nodes) == 1:
        raise ConfigError(
            f"observation key {key!r}: node {nodes[0].ref} is a scalar, the artifact's key has {expected} "
            f"values: map one array node of length {expected} or {expected} scalar nodes"
        )
    raise ConfigError(
        f"observation key {key!r}: {size} scalar nodes, the artifact's key has {expected} values: map "
        f"{expected} scalar nodes or one array node of length {expected}"
    )


def _size(nodes: tuple[BoundNode, ...], what: str, expected: int) -> int:
    if len(nodes) == 1:
        return 1 if nodes[0].length is None else nodes[0].length
    arrays = [b for b in nodes if b.length is not None]
    if arrays:
        raise ConfigError(
            f"{arrays[0].role} {arrays[0].ref} is an array of {arrays[0].length}: list {expected} scalar nodes "
            f"or one array node for the {what}"
        )
    return len(nodes)


def _layout(nodes: tuple[BoundNode, ...]) -> str:
    if len(nodes) == 1 and nodes[0].length is not None:
        return f"{nodes[0].vtype.name}[{nodes[0].length}]"
    return (
        f"{len(nodes)} x {nodes[0].vtype.name}"
        if len({b.vtype for b in nodes}) == 1
        else f"{len(nodes)} scalars"
    )
