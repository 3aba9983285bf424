"""One OPC UA session to the PLC: the node map checked against the server at connect, then one Read
and a two-step Write per control cycle, with every node's own status code looked at.

`async with PlcClient(cfg, io) as plc:` connects (bounded by a timeout), resolves the node map's
references (namespace URIs through the server's NamespaceArray, browse paths through the server),
reads each node's DataType, ValueRank, ArrayDimensions and access level once, and refuses with one
`ConfigError` line a map that cannot carry the policy's observation and action. From then on it writes
exactly each node's type and shape. A reconnect is a new PlcClient: nothing of the old session is reused.

The handshake cannot be half-applied: `answer()` writes the action and the heartbeat in one request and,
only if the PLC accepted every one of them, the status and the answered sequence number in a second. A
PLC that steps when ActionSeq == ObservationSeq therefore never steps on an action it refused, and never
reads an OK status for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncua import Client, ua
from asyncua.common.ua_utils import data_type_to_variant_type

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge import typed_values as tv
from rl2edge.plc_bridge.nodemap import NodeMap, default_node_map
from rl2edge.plc_bridge.noderefs import NodeRef, parse_ref
from rl2edge.plc_bridge.security import SecurityConfig, apply_client_security, pinned_certificate_mismatch
from rl2edge.plc_bridge.status import CycleStatus

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
class BridgeConfig:
    endpoint: str
    node_map: NodeMap = field(default_factory=default_node_map)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    request_timeout_s: float = 1.0
    """Every service call (read, write, browse) is bounded by this."""
    connect_timeout_s: float = 5.0
    session_timeout_ms: int = 30_000
    """The server drops a session abandoned by a pulled cable after this long."""

    def check(self) -> None:
        check_endpoint(self.endpoint)
        for name, value in (
            ("--timeout-ms", self.request_timeout_s),
            ("connect timeout", self.connect_timeout_s),
        ):
            if not 0 < value * 1e3 <= 600_000:  # also refuses NaN and inf
                raise ConfigError(f"{name} {value * 1e3:g}: choose a timeout above 0 and up to 600000 ms")
        self.security.check("client")


def check_endpoint(endpoint: str) -> None:
    """opc.tcp://host:port with a host and a port in range; one line naming the problem otherwise."""
    from urllib.parse import urlsplit

    example = "opc.tcp://plc:4840 or opc.tcp://[::1]:4840"
    if not endpoint.startswith("opc.tcp://"):
        raise ConfigError(f"endpoint {endpoint!r} must look like {example}")
    try:
        url = urlsplit(endpoint)
        host, port = url.hostname, url.port
    except ValueError as exc:
        raise ConfigError(
            f"endpoint {endpoint!r} is not a valid URL ({exc}); it must look like {example}"
        ) from None
    if not host:
        raise ConfigError(f"endpoint {endpoint!r} has no host; it must look like {example}")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"endpoint {endpoint!r}: port {port} is outside 1..65535")


@dataclass(frozen=True)
class PlantIo:
    """What the policy reads and writes, to check the node map against the server's nodes."""

    obs_size: int
    action_size: int
    discrete: bool
    action_low: tuple[float, ...]
    """Discrete: (first index,); Box: the lower bounds."""
    action_high: tuple[float, ...]


@dataclass(frozen=True)
class BoundNode:
    role: str
    """`observation[2]`, `action`, `heartbeat`...: what messages call it."""
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
class Reading:
    observation: list[Any] | None
    sequence: Any
    """None when the PLC marked the sequence number itself Bad or Uncertain."""
    problem: str = ""
    """Non-empty when a node's value is not Good (Bad or Uncertain quality): the cycle is INVALID."""


@dataclass(frozen=True)
class WriteResult:
    refused: tuple[str, ...] = ()
    """`role ref: StatusCode` of every node whose write the PLC refused."""
    answered: bool = False
    """The sequence number was written: the PLC may act on this action."""

    @property
    def ok(self) -> bool:
        return not self.refused


def plant_io_of(policy: Any) -> PlantIo:
    """The PlantIo of a runtime Policy."""
    import numpy as np

    if policy.discrete:
        lo, hi = policy.action_index_range
        return PlantIo(int(np.prod(policy.obs_shape)), 1, True, (float(lo),), (float(hi),))
    low, high = policy.action_low.reshape(-1), policy.action_high.reshape(-1)
    return PlantIo(
        int(np.prod(policy.obs_shape)),
        int(low.size),
        False,
        tuple(float(v) for v in low),
        tuple(float(v) for v in high),
    )


class PlcClient:
    def __init__(self, cfg: BridgeConfig, io: PlantIo):
        self.cfg, self.io = cfg, io
        self._client = Client(cfg.endpoint, timeout=cfg.request_timeout_s)
        self._client.session_timeout = cfg.session_timeout_ms
        self._client.name = self._client.description = "rl2edge serve"
        self._connected = False
        self.observation: list[BoundNode] = []
        self.action: list[BoundNode] = []
        self.observation_seq: BoundNode | None = None
        self.action_seq: BoundNode | None = None
        self.heartbeat_node: BoundNode | None = None
        self.status_node: BoundNode | None = None
        self._heartbeat = 0
        self._read_params = ua.ReadParameters()
        self.revised_publishing_ms: float | None = None

    # ------------------------------------------------------------------------------------ session
    async def __aenter__(self) -> PlcClient:
        await apply_client_security(self._client, self.cfg.security)
        try:
            await asyncio.wait_for(self._client.connect(), self.cfg.connect_timeout_s)
            self._connected = True
            await asyncio.wait_for(self._bind(), self.cfg.connect_timeout_s)
        except BaseException as exc:
            await self.close()
            if (
                self.cfg.security.mode != "none"
                and isinstance(exc, Exception)
                and not isinstance(exc, ConfigError)
            ):
                why = await pinned_certificate_mismatch(
                    self.cfg.endpoint, self.cfg.security, self.cfg.connect_timeout_s
                )
                if why is not None:
                    raise ConfigError(why) from None
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if not self._connected:
            # connect() may have opened the socket before failing: close it, never leave it to the GC.
            self._client.disconnect_socket()
            return
        self._connected = False
        try:
            await asyncio.wait_for(self._client.disconnect(), self.cfg.request_timeout_s)
        except Exception as exc:  # the peer is gone: closing the socket is all that is left to do
            _logger.debug("disconnect: %s", exc)
            self._client.disconnect_socket()

    # ------------------------------------------------------------------------- the map vs the server
    async def _node_id(self, ref: NodeRef, namespaces: list[str], role: str) -> ua.NodeId:
        if ref.identifier is not None:
            return ref.node_id(namespaces)
        try:
            node = await self._client.nodes.objects.get_child(ref.browse_path(namespaces))
        except ua.UaStatusCodeError as exc:
            raise ConfigError(
                f"{role} {ref.text}: no such browse path under the Objects folder ({type(exc).__name__}); "
                "browse the server (e.g. with UaExpert) and correct the node map"
            ) from None
        return node.nodeid

    async def _bind(self) -> None:
        m = self.cfg.node_map
        namespaces = await self._client.get_namespace_array()
        roles: list[tuple[str, str]] = [
            *(
                (f"observation[{i}]" if len(m.observation) > 1 else "observation", r)
                for i, r in enumerate(m.observation)
            ),
            ("observation_seq", m.observation_seq),
            *((f"action[{i}]" if len(m.action) > 1 else "action", r) for i, r in enumerate(m.action)),
            ("action_seq", m.action_seq),
            ("heartbeat", m.heartbeat),
            ("status", m.status),
        ]
        ids = [await self._node_id(parse_ref(ref, role), namespaces, role) for role, ref in roles]
        params = ua.ReadParameters()
        params.NodesToRead = [ua.ReadValueId(NodeId=i, AttributeId=a) for i in ids for a in _ATTRS]
        results = await self._client.uaclient.read(params)
        bound: list[BoundNode] = []
        for k, ((role, ref), node_id) in enumerate(zip(roles, ids, strict=True)):
            dtype, rank, dims, access, value = results[k * len(_ATTRS) : (k + 1) * len(_ATTRS)]
            if not dtype.StatusCode.is_good():
                raise ConfigError(
                    f"{role} {ref}: the server has no such node ({dtype.StatusCode.name}); correct the node map"
                )
            bound.append(await self._typed(role, ref, node_id, dtype, rank, dims, access, value))
        n_obs, n_act = len(m.observation), len(m.action)
        self.observation = bound[:n_obs]
        self.observation_seq = bound[n_obs]
        self.action = bound[n_obs + 1 : n_obs + 1 + n_act]
        self.action_seq, self.heartbeat_node, self.status_node = bound[n_obs + 1 + n_act :]
        self._check_fit()
        hb = results[(len(roles) - 2) * len(_ATTRS) + 4]
        current = hb.Value.Value if hb.StatusCode.is_good() and hb.Value is not None else 0
        # Continue the PLC's heartbeat from where it stands, so a restart of serve never moves it backwards.
        self._heartbeat = int(current) if isinstance(current, int) and not isinstance(current, bool) else 0
        self._read_params.NodesToRead = [
            ua.ReadValueId(NodeId=b.node_id, AttributeId=ua.AttributeIds.Value)
            for b in (*self.observation, self.observation_seq)
        ]
        _logger.info(
            "connected to %s (%s): observation %s, action %s, sequence %s/%s, heartbeat %s, status %s",
            self.cfg.endpoint,
            self.cfg.security.mode,
            _layout(self.observation),
            _layout(self.action),
            self.observation_seq.vtype.name,
            self.action_seq.vtype.name,
            self.heartbeat_node.vtype.name,
            self.status_node.vtype.name,
        )

    async def _typed(
        self,
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
                vtype = await data_type_to_variant_type(self._client.get_node(dt))
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

    def _check_fit(self) -> None:
        """Refuse, in one line, a map that cannot carry the policy's observation and action."""
        io = self.io
        size = _size(self.observation, "observation", io.obs_size)
        if size != io.obs_size:
            raise ConfigError(
                f"the observation nodes hold {size} values ({_layout(self.observation)}); the policy reads "
                f"{io.obs_size}: map {io.obs_size} scalar nodes or one array node of length {io.obs_size}"
            )
        size = _size(self.action, "action", io.action_size)
        if size != io.action_size:
            raise ConfigError(
                f"the action nodes hold {size} values ({_layout(self.action)}); the policy writes "
                f"{io.action_size}: map {io.action_size} scalar nodes or one array node of length {io.action_size}"
            )
        for b in self.action:
            lo, hi = tv.value_range(b.vtype)
            if io.discrete:
                first, last = io.action_low[0], io.action_high[0]
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
                _logger.warning(
                    "%s %s is a %s: the continuous action is rounded", b.role, b.ref, b.vtype.name
                )
        assert self.observation_seq and self.action_seq and self.heartbeat_node and self.status_node
        for b in (self.observation_seq, self.action_seq, self.heartbeat_node, self.status_node):
            if b.length is not None or b.vtype not in tv.INT_RANGES:
                raise ConfigError(
                    f"{b.role} {b.ref}: must be an integer scalar (e.g. DINT/Int32, UINT/UInt16), "
                    f"not a {b.vtype.name}{'' if b.length is None else ' array'}"
                )
        if not tv.range_fits(self.observation_seq.vtype, self.action_seq.vtype):
            raise ConfigError(
                f"action_seq {self.action_seq.ref} is a {self.action_seq.vtype.name} and cannot echo every value "
                f"of observation_seq {self.observation_seq.ref}, a {self.observation_seq.vtype.name}: declare both "
                "with the same type"
            )
        if tv.value_range(self.status_node.vtype)[1] < max(CycleStatus):
            raise ConfigError(
                f"status {self.status_node.ref}: a {self.status_node.vtype.name} cannot hold the status codes"
            )

    # ------------------------------------------------------------------------------------- a cycle
    async def read(self) -> Reading:
        """One Read of the observation node(s) and the PLC's sequence number, qualities checked."""
        results = await self._client.uaclient.read(self._read_params)
        bad = [
            f"{b.role} {b.ref}: {dv.StatusCode.name}"
            for b, dv in zip((*self.observation, self.observation_seq), results, strict=True)
            if not dv.StatusCode.is_good()
        ]
        values = [dv.Value.Value if dv.Value is not None else None for dv in results]
        obs = (
            values[0]
            if len(self.observation) == 1 and self.observation[0].length is not None
            else values[:-1]
        )
        problem = f"bad quality: {'; '.join(bad)}" if bad else ""
        sequence = values[-1] if results[-1].StatusCode.is_good() else None  # never answer a doubtful one
        return Reading(obs, sequence, problem)

    def _next_heartbeat(self) -> int:
        assert self.heartbeat_node is not None
        self._heartbeat = tv.wrap(self._heartbeat + 1, self.heartbeat_node.vtype)
        return self._heartbeat

    async def _write(self, nodes: Sequence[BoundNode], values: Sequence[Any]) -> tuple[str, ...]:
        params = ua.WriteParameters()
        params.NodesToWrite = [
            ua.WriteValue(
                NodeId=b.node_id, AttributeId=ua.AttributeIds.Value, Value=ua.DataValue(b.variant(v))
            )
            for b, v in zip(nodes, values, strict=True)
        ]
        results = await self._client.uaclient.write(params)
        return tuple(
            f"{b.role} {b.ref}: {sc.name}" for b, sc in zip(nodes, results, strict=True) if not sc.is_good()
        )

    def _action_values(self, action: Sequence[float]) -> list[Any]:
        if len(self.action) == 1 and self.action[0].length is not None:
            return [list(action)]
        return list(action)

    async def answer(self, action: Sequence[float], status: int, sequence: Any) -> WriteResult:
        """The action and heartbeat; then, only if they were accepted, the status and the sequence number
        they answer, in one request. The status is not written before the action is accepted: a PLC that
        refuses the action sees the caller's WRITE_REJECTED, never a passing OK. ValueError if a value
        does not fit its node (the caller writes the safe action)."""
        assert self.heartbeat_node and self.status_node and self.action_seq
        first = [*self.action, self.heartbeat_node]
        refused = await self._write(first, [*self._action_values(action), self._next_heartbeat()])
        if refused:
            return WriteResult(refused)
        refused = await self._write([self.status_node, self.action_seq], [status, sequence])
        seq_refused = any(r.startswith(f"{self.action_seq.role} ") for r in refused)
        return WriteResult(refused, answered=not seq_refused)

    async def answer_in_one_request(self, action: Sequence[float], status: int, sequence: Any) -> WriteResult:
        """The handshake in one Write: a round trip cheaper than `answer`, but a PLC that refuses the
        action while accepting the sequence number steps on its old command. Not used by the loop;
        `benchmarks/loop_latency.py` measures what the two-request handshake costs against it."""
        assert self.heartbeat_node and self.status_node and self.action_seq
        nodes = [*self.action, self.heartbeat_node, self.status_node, self.action_seq]
        values = [*self._action_values(action), self._next_heartbeat(), status, sequence]
        refused = await self._write(nodes, values)
        return WriteResult(refused, answered=not refused)

    async def write_safe(self, action: Sequence[float], status: int) -> WriteResult:
        """The safe action, heartbeat and status, answering no observation: STARTUP, SHUTDOWN, and a cycle
        whose own write was refused. The sequence number is left as it is, so a lockstep PLC does not step."""
        assert self.heartbeat_node and self.status_node
        nodes = [*self.action, self.heartbeat_node, self.status_node]
        return WriteResult(
            await self._write(nodes, [*self._action_values(action), self._next_heartbeat(), status])
        )

    async def subscribe_sequence(self, period_ms: float) -> asyncio.Queue[Any]:
        """Data-change notifications of the PLC's sequence number; only the newest is kept. A server that
        revises the publishing interval above the period is logged: cycles then come at its pace."""
        changes: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)

        class Handler:
            def datachange_notification(self, node: Any, value: Any, data: Any) -> None:
                if changes.full():
                    changes.get_nowait()
                changes.put_nowait(value)

        assert self.observation_seq is not None
        params = ua.CreateSubscriptionParameters(
            RequestedPublishingInterval=period_ms,
            RequestedLifetimeCount=10000,
            RequestedMaxKeepAliveCount=self._client.get_keepalive_count(period_ms),
            MaxNotificationsPerPublish=10000,
            PublishingEnabled=True,
            Priority=0,
        )
        sub = await self._client.create_subscription(params, Handler())
        self.revised_publishing_ms = float(sub.parameters.RequestedPublishingInterval)
        if self.revised_publishing_ms > period_ms:
            _logger.warning(
                "the server revised the publishing interval from %g ms to %g ms: in subscription mode cycles "
                "follow the PLC's sequence number at most every %g ms (and at least once per %g ms period)",
                period_ms,
                self.revised_publishing_ms,
                self.revised_publishing_ms,
                period_ms,
            )
        else:
            _logger.info("subscription publishing interval %g ms", self.revised_publishing_ms)
        await sub.subscribe_data_change(self._client.get_node(self.observation_seq.node_id))
        return changes


def _size(nodes: list[BoundNode], what: str, expected: int) -> int:
    if len(nodes) == 1:
        return 1 if nodes[0].length is None else nodes[0].length
    arrays = [b for b in nodes if b.length is not None]
    if arrays:
        raise ConfigError(
            f"{arrays[0].role} {arrays[0].ref} is an array of {arrays[0].length}: list {expected} scalar nodes "
            f"or one array node for the {what}"
        )
    return len(nodes)


def _layout(nodes: list[BoundNode]) -> str:
    if len(nodes) == 1 and nodes[0].length is not None:
        return f"{nodes[0].vtype.name}[{nodes[0].length}]"
    return (
        f"{len(nodes)} x {nodes[0].vtype.name}"
        if len({b.vtype for b in nodes}) == 1
        else f"{len(nodes)} scalars"
    )


def connect_error_hint(exc: BaseException, cfg: BridgeConfig) -> str | None:
    """A one-line cause and remedy for a connect failure that retrying cannot fix, else None."""
    text = f"{type(exc).__name__}: {exc}"
    sc = getattr(exc, "code", None)
    name = ua.StatusCode(sc).name if isinstance(sc, int) else ""
    if any(k in name or k in text for k in ("BadSecurityChecksFailed", "BadCertificate")) or (
        isinstance(exc, AssertionError) and cfg.security.mode != "none"
    ):
        # node-opcua answers an untrusted certificate with BadSecurityChecksFailed, which asyncua 2.1
        # cannot parse: it surfaces as a bare AssertionError during the secure-channel handshake.
        cert = cfg.security.certificate
        why = name or "it closed the secure channel during the certificate exchange"
        return (
            f"the PLC at {cfg.endpoint} refused this client's certificate{f' {cert}' if cert else ''} ({why}): "
            "add it to the PLC's trusted client certificates (in TIA Portal/CODESYS: the certificate manager), "
            "then restart serve"
        )
    if (
        "BadUserAccessDenied" in name
        or "BadIdentityTokenRejected" in name
        or "BadIdentityTokenInvalid" in name
    ):
        return f"the PLC at {cfg.endpoint} refused the user {cfg.security.username!r} ({name}): check --user and the password"
    if "BadSecurityModeRejected" in name or "BadSecurityPolicyRejected" in name:
        return f"the PLC at {cfg.endpoint} does not offer --security {cfg.security.mode} ({name}): choose one its endpoints offer"
    return None
