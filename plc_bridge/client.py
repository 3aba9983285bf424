"""One OPC UA session to the PLC: the node map bound at connect, then one Read and a two-step Write per
control cycle, with every node's own status code looked at.

`async with PlcClient(cfg, io) as plc:` connects (bounded by a timeout) and binds the node map to the
server's nodes (plc_bridge.binding: the references resolved, each node's type, shape and access level read
once, a map that cannot carry the policy's observation and action refused with one `ConfigError` line).
From then on it writes exactly each node's type and shape. A reconnect is a new PlcClient: nothing of the
old session is reused.

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

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge import typed_values as tv
from rl2edge.plc_bridge.binding import BoundNode, BoundNodes, PlantIo, bind
from rl2edge.plc_bridge.nodemap import NodeMap, default_node_map
from rl2edge.plc_bridge.security import SecurityConfig, apply_client_security, pinned_certificate_mismatch

_logger = logging.getLogger(__name__)


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
class Reading:
    observation: list[Any] | None
    sequence: Any
    """None when the PLC marked the sequence number itself Bad or Uncertain."""
    problem: str = ""
    """Non-empty when a node's value is not Good (Bad or Uncertain quality): the cycle is INVALID."""
    episode_start: bool = False
    """The PLC's episode-start flag, where the node map has one (else False)."""


@dataclass(frozen=True)
class WriteResult:
    refused: tuple[str, ...] = ()
    """`role ref: StatusCode` of every node whose write the PLC refused."""
    answered: bool = False
    """The sequence number was written: the PLC may act on this action."""

    @property
    def ok(self) -> bool:
        return not self.refused


class PlcClient:
    def __init__(self, cfg: BridgeConfig, io: PlantIo):
        self.cfg, self.io = cfg, io
        self._client = Client(cfg.endpoint, timeout=cfg.request_timeout_s)
        self._client.session_timeout = cfg.session_timeout_ms
        self._client.name = self._client.description = "rl2edge serve"
        self._connected = False
        self.nodes: BoundNodes | None = None
        """The node map bound to this server's nodes (set at connect)."""
        self._heartbeat = 0
        self._read_params = ua.ReadParameters()
        self._one_array = False
        """The observation is one array node: its value is the observation as read, nothing to join."""
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

    async def _bind(self) -> None:
        self.nodes = nodes = await bind(self._client, self.cfg.node_map, self.io)
        self._heartbeat = nodes.heartbeat_value
        self._one_array = len(nodes.observation) == 1 and nodes.observation[0].length is not None
        self._read_params.NodesToRead = [
            ua.ReadValueId(NodeId=b.node_id, AttributeId=ua.AttributeIds.Value)
            for b in (*nodes.observation, nodes.observation_seq, *self._episode_node(nodes))
        ]
        _logger.info("connected to %s (%s): %s", self.cfg.endpoint, self.cfg.security.mode, nodes.describe())

    @property
    def _bound(self) -> BoundNodes:
        assert self.nodes is not None, "not connected"
        return self.nodes

    # ------------------------------------------------------------------------------------- a cycle
    async def read(self) -> Reading:
        """One Read of the observation node(s) and the PLC's sequence number, qualities checked."""
        n = self._bound
        results = await self._client.uaclient.read(self._read_params)
        bad = [
            f"{b.role} {b.ref}: {dv.StatusCode.name}"
            for b, dv in zip(
                (*n.observation, n.observation_seq, *self._episode_node(n)), results, strict=True
            )
            if not dv.StatusCode.is_good()
        ]
        values = [dv.Value.Value if dv.Value is not None else None for dv in results]
        start = False
        if n.episode_start is not None:
            start, results, values = bool(values[-1]), results[:-1], values[:-1]
        obs = values[0] if self._one_array else _joined(n.observation, values[:-1])
        problem = f"bad quality: {'; '.join(bad)}" if bad else ""
        sequence = values[-1] if results[-1].StatusCode.is_good() else None  # never answer a doubtful one
        return Reading(obs, sequence, problem, start)

    @staticmethod
    def _episode_node(nodes: BoundNodes) -> tuple[BoundNode, ...]:
        return () if nodes.episode_start is None else (nodes.episode_start,)

    def _next_heartbeat(self) -> int:
        self._heartbeat = tv.wrap(self._heartbeat + 1, self._bound.heartbeat.vtype)
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
        nodes = self._bound.action
        if len(nodes) == 1 and nodes[0].length is not None:
            return [list(action)]
        return list(action)

    async def answer(self, action: Sequence[float], status: int, sequence: Any) -> WriteResult:
        """The action and heartbeat; then, only if they were accepted, the status and the sequence number
        they answer, in one request. The status is not written before the action is accepted: a PLC that
        refuses the action sees the caller's WRITE_REJECTED, never a passing OK. ValueError if a value
        does not fit its node (the caller writes the safe action)."""
        n = self._bound
        first = [*n.action, n.heartbeat]
        refused = await self._write(first, [*self._action_values(action), self._next_heartbeat()])
        if refused:
            return WriteResult(refused)
        refused = await self._write([n.status, n.action_seq], [status, sequence])
        seq_refused = any(r.startswith(f"{n.action_seq.role} ") for r in refused)
        return WriteResult(refused, answered=not seq_refused)

    async def answer_in_one_request(self, action: Sequence[float], status: int, sequence: Any) -> WriteResult:
        """The handshake in one Write: a round trip cheaper than `answer`, but a PLC that refuses the
        action while accepting the sequence number steps on its old command. Not used by the loop;
        `benchmarks/loop_latency.py` measures what the two-request handshake costs against it."""
        n = self._bound
        nodes = [*n.action, n.heartbeat, n.status, n.action_seq]
        values = [*self._action_values(action), self._next_heartbeat(), status, sequence]
        refused = await self._write(nodes, values)
        return WriteResult(refused, answered=not refused)

    async def write_safe(self, action: Sequence[float], status: int) -> WriteResult:
        """The safe action, heartbeat and status, answering no observation: STARTUP, SHUTDOWN, and a cycle
        whose own write was refused. The sequence number is left as it is, so a lockstep PLC does not step."""
        n = self._bound
        nodes = [*n.action, n.heartbeat, n.status]
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

        seq_node = self._bound.observation_seq
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
        await sub.subscribe_data_change(self._client.get_node(seq_node.node_id))
        return changes


def _joined(nodes: Sequence[BoundNode], values: list[Any]) -> list[Any]:
    """The values of scalar and array nodes as one list, in node order (a per-key map: the concatenation
    in the manifest's key order). A value that is not the node's shape goes in as it is: the observation
    guard then refuses the observation's length."""
    out: list[Any] = []
    for b, v in zip(nodes, values, strict=True):
        if b.length is not None and isinstance(v, list):
            out.extend(v)
        else:
            out.append(v)
    return out


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
