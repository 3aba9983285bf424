"""The node layout of rl2edge's simulated PLC, which the default node map matches.

One object `PLC` in namespace `urn:rl2edge:plc-sim` (index 2, the first one registered), with string
NodeIds `ns=2;s=rl2edge.<Name>`. The observation is one Double array `Observation`; a Dict env's is
there as its keys' values concatenated in the env's key order (what the default node map reads), and
also one Double array per key, `Observation_<key>` (a one-value key too: an array of 1), for a node map
that gives the observation per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from asyncua import Node, Server, ua

NAMESPACE_URI = "urn:rl2edge:plc-sim"


def node_id(name: str, ns: int = 2) -> str:
    return f"ns={ns};s=rl2edge.{name}"


def observation_node_name(key: str) -> str:
    """The node of one key of a Dict observation."""
    return f"Observation_{key}"


@dataclass(frozen=True)
class PlcNodes:
    observation: Node
    observation_seq: Node
    action: Node
    action_seq: Node
    heartbeat: Node
    status: Node
    run: Node
    episode_returns: Node
    episodes: Node
    episode_start: Node
    """True with the first observation of each episode (a node map's `episode_start`)."""
    observation_keys: tuple[Node, ...] = ()
    """A Dict observation's node per key, in key order."""


async def build_plc_nodes(
    server: Server, obs_dim: int, act_dim: int, obs_keys: Sequence[tuple[str, int]] = ()
) -> PlcNodes:
    """Create the PLC object and its variables; the client-written ones are writable. `obs_keys`: a Dict
    observation's (key, number of values), one array node each beside `Observation`."""
    ns = await server.register_namespace(NAMESPACE_URI)
    plc = await server.nodes.objects.add_object(ua.NodeId("rl2edge.PLC", ns), ua.QualifiedName("PLC", ns))

    async def var(name: str, value: object, vtype: ua.VariantType, writable: bool = True) -> Node:
        node = await plc.add_variable(
            ua.NodeId(f"rl2edge.{name}", ns), ua.QualifiedName(name, ns), ua.Variant(value, vtype)
        )
        if isinstance(value, list):  # declared one-dimensional, as a PLC declares ARRAY[0..n-1] OF ...
            await node.write_value_rank(1)
            await node.write_array_dimensions([len(value)] if value else [0])
        if writable:
            await node.set_writable()
        return node

    return PlcNodes(
        observation=await var("Observation", [0.0] * obs_dim, ua.VariantType.Double),
        observation_seq=await var("ObservationSeq", 0, ua.VariantType.UInt32),
        action=await var("Action", [0.0] * act_dim, ua.VariantType.Double),
        action_seq=await var("ActionSeq", 0, ua.VariantType.UInt32),
        heartbeat=await var("Heartbeat", 0, ua.VariantType.UInt32),
        status=await var("Status", 0, ua.VariantType.Int32),
        run=await var("Run", True, ua.VariantType.Boolean),
        episode_returns=await var("EpisodeReturns", [], ua.VariantType.Double, writable=False),
        episodes=await var("Episodes", 0, ua.VariantType.UInt32, writable=False),
        episode_start=await var("EpisodeStart", True, ua.VariantType.Boolean, writable=False),
        observation_keys=tuple(
            [await var(observation_node_name(k), [0.0] * n, ua.VariantType.Double) for k, n in obs_keys]
        ),
    )
