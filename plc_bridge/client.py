"""One OPC UA session to the PLC: one batched Read and one batched Write per control cycle.

`async with PlcClient(cfg) as plc:` connects (bounded by a timeout), resolves the node map, learns the
data types of the nodes it writes, and on exit closes the session (bounded too). A reconnect is a new
PlcClient: nothing of the old session is reused, so nothing of it leaks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asyncua import Client, ua
from asyncua.common.node import Node

from plc_bridge.nodemap import NodeMap, default_node_map
from plc_bridge.security import SecurityConfig, apply_client_security
from rl2edge.errors import BridgeError, ConfigError

_logger = logging.getLogger(__name__)

_INT_TYPES = {
    ua.VariantType.SByte,
    ua.VariantType.Byte,
    ua.VariantType.Int16,
    ua.VariantType.UInt16,
    ua.VariantType.Int32,
    ua.VariantType.UInt32,
    ua.VariantType.Int64,
    ua.VariantType.UInt64,
}


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
        if not self.endpoint.startswith("opc.tcp://"):
            raise ConfigError(f"endpoint {self.endpoint!r} must look like opc.tcp://host:4840")
        self.security.check("client")


class PlcClient:
    def __init__(self, cfg: BridgeConfig):
        self.cfg = cfg
        self._client = Client(cfg.endpoint, timeout=cfg.request_timeout_s)
        self._client.session_timeout = cfg.session_timeout_ms
        self._client.name = self._client.description = "rl2edge serve"
        self._obs: list[Node] = []
        self._write_nodes: list[Node] = []
        self._types: list[ua.VariantType] = []
        self._connected = False

    async def __aenter__(self) -> PlcClient:
        await apply_client_security(self._client, self.cfg.security)
        try:
            await asyncio.wait_for(self._client.connect(), self.cfg.connect_timeout_s)
            self._connected = True
            await asyncio.wait_for(self._resolve(), self.cfg.connect_timeout_s)
        except BaseException:
            await self.close()
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

    async def _node(self, ref: str) -> Node:
        if "/" in ref and not ref.startswith(("ns=", "i=", "s=", "g=", "b=", "nsu=")):
            try:
                return await self._client.nodes.objects.get_child(ref.split("/"))
            except ua.UaError as exc:
                raise BridgeError(f"browse path {ref!r} not found under Objects: {exc}") from None
        try:
            return self._client.get_node(ref)
        except Exception:
            raise ConfigError(
                f"{ref!r} is neither a NodeId (ns=2;s=Name) nor a browse path (2:PLC/2:Name)"
            ) from None

    async def _resolve(self) -> None:
        m = self.cfg.node_map
        self._obs = [await self._node(r) for r in (*m.observation, m.observation_seq)]
        self._write_nodes = [await self._node(r) for r in (*m.action, m.action_seq, m.heartbeat, m.status)]
        results = await self._client.read_attributes(self._write_nodes, ua.AttributeIds.DataType)
        types = []
        for node, dv in zip(self._write_nodes, results, strict=True):
            if not dv.StatusCode.is_good() or dv.Value is None:
                raise BridgeError(f"node {node.nodeid.to_string()} is not readable: {dv.StatusCode}")
            vtype = ua.datatype_to_varianttype(dv.Value.Value)
            if not isinstance(vtype, ua.VariantType):
                raise BridgeError(
                    f"node {node.nodeid.to_string()} has a non-builtin data type {dv.Value.Value}"
                )
            types.append(vtype)
        self._types = types
        _logger.info(
            "connected to %s (%s): %d observation and %d write nodes",
            self.cfg.endpoint,
            self.cfg.security.mode,
            len(self._obs) - 1,
            len(self._write_nodes),
        )

    async def read(self) -> tuple[Any, Any]:
        """One Read of the observation node(s) and the PLC's sequence number: (observation, sequence)."""
        values = await self._client.read_values(self._obs)
        obs = values[0] if self.cfg.node_map.observation_is_array else values[:-1]
        return obs, values[-1]

    async def subscribe_sequence(self, period_ms: float) -> asyncio.Queue[Any]:
        """Data-change notifications of the PLC's sequence number; only the newest is kept."""
        changes: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)

        class Handler:
            def datachange_notification(self, node: Node, value: Any, data: Any) -> None:
                if changes.full():
                    changes.get_nowait()
                changes.put_nowait(value)

        sub = await self._client.create_subscription(period_ms, Handler())
        await sub.subscribe_data_change(self._obs[-1])
        return changes

    async def write(self, action: Sequence[float], answered_seq: int, heartbeat: int, status: int) -> None:
        """One Write of the action, the sequence number it answers, the heartbeat and the status."""
        m = self.cfg.node_map
        vals: list[Any] = [list(action)] if m.action_is_array else list(action)
        vals += [answered_seq, heartbeat, status]
        dvs = [ua.DataValue(ua.Variant(_coerce(v, t), t)) for v, t in zip(vals, self._types, strict=True)]
        await self._client.write_values(self._write_nodes, dvs)


def _coerce(value: Any, vtype: ua.VariantType) -> Any:
    if isinstance(value, list):
        return [_coerce(v, vtype) for v in value]
    if vtype in _INT_TYPES:
        return round(float(value))
    if vtype == ua.VariantType.Boolean:
        return bool(value)
    return float(value)
