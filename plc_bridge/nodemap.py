"""The node map: which PLC nodes hold the observation, the action and the handshake, and what the
safe action is. A YAML file; the default matches `rl2edge plc-sim`.

Node references are NodeIds (`ns=3;s=DB10.Obs`, `nsu=<namespace uri>;s=DB10.Obs`) or browse paths from
the Objects folder (`3:RL/3:Obs_0`, `nsu=<uri>;RL/nsu=<uri>;Obs_0`): see `plc_bridge.noderefs`.
Whether a node is a scalar or an array, and of which type, is the server's to say: the client reads it
at connect, so `action: X` is a scalar or an array as the PLC declares X.

A Dict artifact's observation may be mapped per key (`observation: {lidar: <array node>, imu: [<scalar>,
<scalar>]}`): each key's nodes hold that key's values, and `observation_groups` puts the keys in the
manifest's order, so the client still reads the one concatenated vector the policy takes. A flat list (the
concatenation) serves a Dict artifact as well.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError, short_repr
from rl2edge.fileio import load_yaml
from rl2edge.plc_bridge.fault_response import FaultResponses, parse_fault_responses
from rl2edge.plc_bridge.layout import node_id
from rl2edge.plc_bridge.noderefs import parse_ref
from rl2edge.specs import KEY_NAME


@dataclass(frozen=True)
class NodeMap:
    observation: tuple[str, ...]
    """One array node (or one scalar for a one-value observation), or scalar nodes in observation order;
    empty when the map gives the observation per key (`observation_keys`)."""
    observation_seq: str
    action: tuple[str, ...]
    """One array node, or scalar nodes in action order."""
    action_seq: str
    heartbeat: str
    status: str
    safe_action: tuple[float, ...] | None = None
    """Written at start-up, at shutdown and on faults whose response is (or ends in) safe; None: Box -> 0
    clipped to bounds, Discrete -> first index."""
    obs_range_tolerance: float = 0.05
    """An observation may exceed its declared [low, high] by this fraction of the range width."""
    stale_ms: float | None = None
    """A sequence number unchanged for longer than this (ms) makes the data stale. None: derived from the
    PLC's observed publishing interval (observation_guard.StaleClock)."""
    stale_cycles: int | None = None
    """The older rule, kept for maps that state it: stale after this many loop cycles without a new
    sequence number (it depends on serve's period, which stale_ms does not)."""
    fault_responses: FaultResponses = field(default_factory=FaultResponses)
    """What is written on each fault class (plc_bridge.fault_response)."""
    obs_low: tuple[float | None, ...] | None = None
    """Overrides the artifact's observation bounds (None entries: unbounded)."""
    obs_high: tuple[float | None, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    observation_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """A Dict artifact's observation per key, as the map lists them: (key, its nodes: one array node, one
    scalar for a one-value key, or scalar nodes in the key's order)."""
    episode_start: str | None = None
    """A Boolean (or integer) node the PLC sets with the first observation of each episode; read with the
    observation, it resets a stateful policy's state (docs/serving.md, 'Stateful artifacts')."""
    state_across_episodes: bool = False
    """The map's rule for a stateful artifact with no episode_start node: True lets its state run on from one
    episode into the next (a plant without episodes); False refuses to serve it (`serve
    --allow-state-across-episodes` sets it True)."""

    def roles(self) -> list[tuple[str, str]]:
        """(role, reference) of every node the map names, inputs first: what messages call each node."""
        out: list[tuple[str, str]] = []
        if self.observation_keys:
            for name, refs in self.observation_keys:
                out += key_roles(name, refs)
        else:
            many = len(self.observation) > 1
            out += [
                (f"observation[{i}]" if many else "observation", r) for i, r in enumerate(self.observation)
            ]
        out.append(("observation_seq", self.observation_seq))
        if self.episode_start is not None:
            out.append(("episode_start", self.episode_start))
        many = len(self.action) > 1
        out += [(f"action[{i}]" if many else "action", r) for i, r in enumerate(self.action)]
        out += [("action_seq", self.action_seq), ("heartbeat", self.heartbeat), ("status", self.status)]
        return out

    def check(self) -> None:
        """Every reference parses, and no node has two roles (resolving a reference needs the server: the
        client does that at connect, and checks the resolved nodes the same way)."""
        for key in ("observation", "observation_seq", "action", "action_seq", "heartbeat", "status"):
            value = getattr(self, key)
            if value is None:
                continue
            for i, ref in enumerate(value if isinstance(value, tuple) else (value,)):
                parse_ref(ref, f"{key}[{i}]" if isinstance(value, tuple) and len(value) > 1 else key)
        if self.episode_start is not None:
            parse_ref(self.episode_start, "episode_start")
        for name, refs in self.observation_keys:
            for role, ref in key_roles(name, refs):
                parse_ref(ref, role)
        check_distinct_roles(
            [(role, parse_ref(ref, role).same_node_key(), ref) for role, ref in self.roles()]
        )


SERVE_WRITES = ("action", "action_seq", "heartbeat", "status")


def check_distinct_roles(nodes: Sequence[tuple[str, Hashable, str]]) -> None:
    """ConfigError naming both roles when two roles of the map are one node: a node serve writes that is
    also an input feeds serve its own outputs (its heartbeat as a sequence number never goes stale), and two
    inputs on one node are a copy-paste slip. `nodes`: (role, the node's identity, its reference as written)."""
    seen: dict[Hashable, tuple[str, str]] = {}
    for role, key, ref in nodes:
        if key in seen:
            first, first_ref = seen[key]
            shown = ref if ref == first_ref else f"{first_ref} and {ref}"
            writes = [r for r in (first, role) if r.split("[")[0] in SERVE_WRITES]
            why = (
                f"serve writes {writes[0]}, so the input would read serve's own output"
                if writes and len(writes) < 2
                else "each role needs a node of its own"
            )
            raise ConfigError(
                f"{first} and {role} are the same node ({short_repr(shown, 120)}): {why}; give each its own node"
            )
        seen[key] = (role, ref)


def key_roles(name: str, refs: tuple[str, ...]) -> list[tuple[str, str]]:
    """(role, reference) of one key's nodes: what messages call them (`observation key 'imu'[1]`)."""
    role = f"observation key {name!r}"
    return [(f"{role}[{i}]" if len(refs) > 1 else role, ref) for i, ref in enumerate(refs)]


def observation_groups(node_map: NodeMap, keys: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The per-key nodes of a Dict artifact with `keys` (its manifest's order), or () when the map gives the
    observation flat (`node_map.observation`, the concatenation). ConfigError, one line, when a per-key map
    lacks a key or names one the artifact does not have, or when the artifact has no keys."""
    if not node_map.observation_keys:
        return ()
    mapped = dict(node_map.observation_keys)
    if not keys:
        raise ConfigError(
            f"the node map gives the observation per key ({', '.join(mapped)}), but the artifact's observation "
            "is one Box: map observation as one array node or a list of scalar nodes"
        )
    missing = [k for k in keys if k not in mapped]
    extra = [k for k in mapped if k not in keys]
    if missing or extra:
        parts = [f"lacks key(s) {', '.join(map(repr, missing))}"] if missing else []
        parts += [f"has key(s) {', '.join(map(repr, extra))} the artifact does not"] if extra else []
        raise ConfigError(
            f"the node map's observation {' and '.join(parts)} (the artifact's keys: {', '.join(keys)})"
        )
    return tuple((k, mapped[k]) for k in keys)


def default_node_map() -> NodeMap:
    """plc-sim's layout, every node it publishes (its `Observation` holds a Dict env's keys concatenated,
    too; its `EpisodeStart` resets a stateful artifact's state)."""
    return NodeMap(
        observation=(node_id("Observation"),),
        observation_seq=node_id("ObservationSeq"),
        action=(node_id("Action"),),
        action_seq=node_id("ActionSeq"),
        heartbeat=node_id("Heartbeat"),
        status=node_id("Status"),
        episode_start=node_id("EpisodeStart"),
    )


def _nodes(value: Any, key: str, path: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict) and ("node" in value) != ("nodes" in value):
        return _nodes(value.get("node") or value.get("nodes"), key, path)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(
        f"{path}: {key} must be a node reference, a list of them, or {{node: ...}} / {{nodes: [...]}}"
    )


def _observation(value: Any, path: Path) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """(flat nodes, ()) or ((), per-key nodes): a mapping other than {node: ...} / {nodes: [...]} is per key."""
    if not isinstance(value, dict) or set(value) in ({"node"}, {"nodes"}):
        return _nodes(value, "observation", path), ()
    if not value:
        raise ConfigError(f"{path}: observation is an empty mapping; map each observation key to its node(s)")
    for k in value:
        if not isinstance(k, str) or not KEY_NAME.fullmatch(k):
            raise ConfigError(
                f"{path}: observation key {short_repr(k)} is not a Dict observation key's name (letters, "
                "digits and underscores); map observation: {<key>: <node>, ...}"
            )
    return (), tuple((k, _nodes(v, f"observation key {k!r}", path)) for k, v in value.items())


def _floats(value: Any, key: str, path: Path, allow_none: bool = False) -> tuple[Any, ...] | None:
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    try:
        out = tuple(None if (v is None and allow_none) else float(v) for v in values)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(
            f"{path}: {key} must be a number or a list of numbers, got {short_repr(value)}"
        ) from None
    for i, v in enumerate(out):
        if v is not None and not math.isfinite(v):
            what = "a finite number or null (unbounded)" if allow_none else "a finite number"
            raise ConfigError(f"{path}: {key}[{i}] must be {what}, got {v}")
    return out


def load_node_map(path: str | Path | None) -> NodeMap:
    if path is None:
        return default_node_map()
    path = Path(path)
    data = load_yaml(path, "node map")
    if not isinstance(data, dict):
        raise ConfigError(f"node map {path} must be a mapping")
    required = ("observation", "observation_seq", "action", "action_seq", "heartbeat", "status")
    missing = [k for k in required if k not in data]
    if missing:
        raise ConfigError(f"node map {path} lacks {', '.join(missing)}")
    known = {
        *required,
        "safe_action",
        "fault_response",
        "hold_ms",
        "ramp_rate",
        "obs_range_tolerance",
        "stale_ms",
        "stale_cycles",
        "obs_low",
        "obs_high",
        "episode_start",
        "state_across_episodes",
    }
    unknown = sorted(short_repr(k) for k in data if k not in known)
    if unknown:
        raise ConfigError(
            f"node map {path}: unknown keys {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    for key in ("observation_seq", "action_seq", "heartbeat", "status"):
        if not isinstance(data[key], str):
            raise ConfigError(f"{path}: {key} must be one node reference")
    if "episode_start" in data and not isinstance(data["episode_start"], str):
        raise ConfigError(f"{path}: episode_start must be one node reference (a Boolean the PLC sets)")
    across = data.get("state_across_episodes", False)
    if not isinstance(across, bool):
        raise ConfigError(f"{path}: state_across_episodes must be true or false, got {short_repr(across)}")
    if across and "episode_start" in data:
        raise ConfigError(
            f"{path}: state_across_episodes: true and an episode_start node contradict each other; keep the "
            "node (the state resets at each episode start) or the rule (it never does)"
        )
    stale = data.get("stale_cycles")
    if stale is not None and (
        isinstance(stale, bool) or not isinstance(stale, int) or not 1 <= stale <= 1_000_000
    ):
        raise ConfigError(
            f"{path}: stale_cycles must be a whole number from 1 to 1000000, got {short_repr(stale)}"
        )
    stale_ms = data.get("stale_ms")
    if stale_ms is not None and (
        isinstance(stale_ms, bool) or not isinstance(stale_ms, int | float) or not 1 <= stale_ms <= 3_600_000
    ):
        raise ConfigError(
            f"{path}: stale_ms must be a time in milliseconds from 1 to 3600000, got {short_repr(stale_ms)}"
        )
    if stale is not None and stale_ms is not None:
        raise ConfigError(
            f"{path}: give stale_ms (a time) or stale_cycles (loop cycles), not both; stale_ms is the one "
            "that does not depend on serve's period"
        )
    tolerance = data.get("obs_range_tolerance", 0.05)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance <= 10:
        raise ConfigError(
            f"{path}: obs_range_tolerance must be a number from 0 to 10 (a fraction of each range), got {short_repr(tolerance)}"
        )
    observation, observation_keys = _observation(data["observation"], path)
    node_map = NodeMap(
        observation=observation,
        observation_keys=observation_keys,
        observation_seq=data["observation_seq"],
        action=_nodes(data["action"], "action", path),
        action_seq=data["action_seq"],
        heartbeat=data["heartbeat"],
        status=data["status"],
        safe_action=_floats(data.get("safe_action"), "safe_action", path),
        obs_range_tolerance=float(tolerance),
        stale_ms=None if stale_ms is None else float(stale_ms),
        stale_cycles=stale,
        fault_responses=parse_fault_responses(data, str(path)),
        obs_low=_floats(data.get("obs_low"), "obs_low", path, allow_none=True),
        obs_high=_floats(data.get("obs_high"), "obs_high", path, allow_none=True),
        episode_start=data.get("episode_start"),
        state_across_episodes=across,
    )
    if node_map.obs_low is not None and node_map.obs_high is not None:
        for i, (lo, hi) in enumerate(
            zip(node_map.obs_low, node_map.obs_high, strict=False)
        ):  # lengths: ObservationGuard
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"{path}: obs_low[{i}] = {lo:g} is above obs_high[{i}] = {hi:g}")
    try:
        node_map.check()
    except ConfigError as exc:
        raise ConfigError(f"node map {path}: {exc}") from None
    return node_map
