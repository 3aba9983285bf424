"""`rl2edge plc-sim`: a real OPC UA server (asyncua) that plays the PLC around a Gymnasium environment,
with the node layout of `plc_bridge.layout` (what the default node map expects).

lockstep: the environment steps when the written ActionSeq answers the current ObservationSeq (each
observation gets exactly one action: for tests and for comparing with `rl2edge evaluate`).
realtime: the environment steps every period with the last written action held, as a plant would.
Episode i uses seed S+i, as `rl2edge evaluate --seed S` does. A writable `Run` node is the PLC's
RUN/STOP switch: while false the plant is frozen (observation and sequence number do not move).

A Dict-observation env's observation is written each step to `Observation` (its keys' values
concatenated in the env's key order: what the default node map reads) and to one array node per key,
`Observation_<key>` (what a node map that gives the observation per key reads).

strict: writes are refused with BadTypeMismatch unless their type and shape are the node's (a scalar
for a scalar, an array of the declared length for an array), as S7, CODESYS and open62541 servers
refuse them. asyncua alone checks the type but accepts an array written into a scalar.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from asyncua import Server, ua
from asyncua.common.callback import CallbackType

from rl2edge.errors import ConfigError
from rl2edge.fileio import write_json_atomic
from rl2edge.plc_bridge.layout import PlcNodes, build_plc_nodes, node_id, observation_node_name
from rl2edge.plc_bridge.security import SecurityConfig, apply_server_security

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimConfig:
    env_id: str
    seed: int = 0
    endpoint: str = "opc.tcp://127.0.0.1:4840"
    mode: str = "lockstep"
    period_ms: float = 20.0
    episodes: int | None = None
    record: Path | None = None
    trace: Path | None = None
    """JSON lines, one per plant step: the sequence number, the observation it was published with, the
    action the plant applied and the status serve wrote with it (what a PLC's trace buffer would hold)."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    strict: bool = False
    invalid_rate: float = 0.0
    """The share of published observations whose first value is NaN (a failing sensor; fault injection
    seeded by `seed`): serve answers them as its node map's fault response says."""

    def check(self) -> None:
        if not 0.0 <= self.invalid_rate <= 1.0:
            raise ConfigError(f"--invalid-rate {self.invalid_rate:g}: choose a share from 0 to 1")
        if self.mode not in ("lockstep", "realtime"):
            raise ConfigError(f"--mode {self.mode!r}: choose lockstep or realtime")
        from rl2edge.plc_bridge.client import check_endpoint

        check_endpoint(self.endpoint)
        if not 1 <= self.period_ms <= 60_000:  # 0 would spin at 100% CPU; also refuses NaN and inf
            raise ConfigError(f"--period-ms {self.period_ms:g}: choose a period from 1 to 60000 ms")
        if self.episodes is not None and self.episodes < 1:
            raise ConfigError("--episodes must be at least 1")
        self.security.check("server")


class PlcSim:
    def __init__(self, cfg: SimConfig):
        import gymnasium as gym

        from rl2edge.train.core.envs import make_env  # gymnasium only; no deep-learning framework

        cfg.check()
        self.cfg = cfg
        self.env = make_env(cfg.env_id)
        self._faults = np.random.default_rng([cfg.seed, 7])  # --invalid-rate's draws, apart from the env's
        space = self.env.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        # MultiDiscrete/MultiBinary: each component's first and last index (MultiBinary: 0 and 1)
        self.index_bounds: tuple[np.ndarray, np.ndarray] | None = None
        if isinstance(space, gym.spaces.MultiDiscrete):
            first = np.asarray(getattr(space, "start", np.zeros_like(space.nvec)), np.int64).reshape(-1)
            self.index_bounds = first, first + space.nvec.reshape(-1).astype(np.int64) - 1
        elif isinstance(space, gym.spaces.MultiBinary):
            self.index_bounds = (
                np.zeros(int(np.prod(space.shape)), np.int64),
                np.ones(int(np.prod(space.shape)), np.int64),
            )
        self.act_dim = 1 if self.discrete else int(np.prod(space.shape))
        # a Dict observation's (key, number of values), in the env's key order; [] for a Box
        self.obs_keys = _dict_keys(self.env.observation_space, cfg.env_id)
        self.obs_dim = (
            sum(size for _, size in self.obs_keys)
            if self.obs_keys
            else int(np.prod(self.env.observation_space.shape))
        )
        self.returns: list[float] = []
        self.server: Server | None = None
        self.nodes: PlcNodes | None = None
        self._written = asyncio.Event()

    async def _on_write(self, event: Any, dispatcher: Any) -> None:
        self._written.set()

    async def start(self) -> None:
        sec = self.cfg.security
        user_manager = None
        if sec.username is not None:
            from rl2edge.plc_bridge.security import PasswordUserManager

            user_manager = PasswordUserManager(sec.username, sec.password or "")
        server = Server(user_manager=user_manager)
        await server.init()
        server.set_endpoint(self.cfg.endpoint)
        server.set_server_name("rl2edge plc-sim")
        await apply_server_security(server, sec)
        self.nodes = await build_plc_nodes(server, self.obs_dim, self.act_dim, self.obs_keys)
        server.subscribe_server_callback(CallbackType.PostWrite, self._on_write)
        if self.cfg.strict:
            _refuse_mistyped_writes(server)
        try:
            await server.start()
        except OSError as exc:  # socket.gaierror is one: an unresolvable host
            host = self.cfg.endpoint.split("://", 1)[-1]
            if getattr(exc, "errno", None) == errno.EADDRINUSE:
                why = "the port is in use (another plc-sim or OPC UA server?); choose another port in --endpoint"
            elif isinstance(exc, socket.gaierror):
                why = f"the host name does not resolve ({exc.strerror}); use an address of this machine"
            else:
                why = f"{exc.strerror or exc}; use an address and port of this machine that are free"
            raise ConfigError(f"plc-sim cannot listen on {host}: {why}") from None
        self.server = server
        _logger.info(
            "plc-sim %s (%s, %s) listening on %s", self.cfg.env_id, self.cfg.mode, sec.mode, self.cfg.endpoint
        )
        if self.obs_keys:
            _logger.info(
                "Dict observation: %s holds the keys concatenated (the default node map reads it), and one "
                "Double array per key, for a per-key node map: observation: {%s}",
                node_id("Observation"),
                ", ".join(f"{key}: {node_id(observation_node_name(key))}" for key, _ in self.obs_keys),
            )

    async def stop(self) -> None:
        if self.server is not None:
            # Cut the clients first, as a PLC powering down does: Server.stop() would otherwise wait for
            # connected clients (serve keeps its session open) and the process would not exit.
            for transport in list(getattr(self.server.iserver, "asyncio_transports", [])):
                transport.abort()
            try:
                await asyncio.wait_for(self.server.stop(), 5.0)
            except (TimeoutError, asyncio.TimeoutError):  # distinct before 3.11
                _logger.warning("OPC UA server did not stop within 5 s; exiting anyway")
            self.server = None
        self.env.close()

    async def _publish(self, obs: Any, seq: int, episode_start: bool) -> None:
        """The observation, the episode-start flag, then the sequence number: a reader that sees the new
        sequence number sees the rest of this step too."""
        assert self.nodes is not None
        # a Dict observation: each key's values, and in `Observation` their concatenation
        per_key = [np.asarray(obs[key], np.float64).reshape(-1).tolist() for key, _ in self.obs_keys]
        if per_key:
            values = [v for key_values in per_key for v in key_values]
        else:
            values = np.asarray(obs, np.float64).reshape(-1).tolist()
        if self.cfg.invalid_rate and self._faults.random() < self.cfg.invalid_rate:  # a failing sensor
            values[0] = float("nan")
            if per_key:
                per_key[0][0] = float("nan")
        await self.nodes.observation.write_value(ua.Variant(values, ua.VariantType.Double))
        for node, key_values in zip(self.nodes.observation_keys, per_key, strict=True):
            await node.write_value(ua.Variant(key_values, ua.VariantType.Double))
        await self.nodes.episode_start.write_value(ua.Variant(episode_start, ua.VariantType.Boolean))
        await self.nodes.observation_seq.write_value(ua.Variant(seq, ua.VariantType.UInt32))

    def _env_action(self, raw: Any) -> Any:
        """What the plant does with whatever was written: never crash on it."""
        a = np.nan_to_num(np.asarray(raw if raw is not None else [0.0], np.float64).reshape(-1))
        if self.discrete:
            n, start = int(self.env.action_space.n), int(getattr(self.env.action_space, "start", 0))
            return int(np.clip(np.round(a[0]) if a.size else start, start, start + n - 1))
        space = self.env.action_space
        if self.index_bounds is not None:  # one index per component, rounded and held to its choices
            lo, hi = self.index_bounds
            a = np.resize(a, lo.shape) if a.size != lo.size else a
            return np.clip(np.round(a), lo, hi).astype(space.dtype).reshape(space.shape)
        a = np.resize(a, space.shape) if a.size != int(np.prod(space.shape)) else a.reshape(space.shape)
        return np.clip(a, space.low, space.high).astype(space.dtype)

    async def run(self, stop: asyncio.Event) -> list[float]:
        """Serve episodes until `stop` or `episodes` are done; returns the episode returns."""
        await self.start()
        assert self.nodes is not None
        nodes = self.nodes
        period = self.cfg.period_ms / 1e3
        episode, total = 0, 0.0
        obs, _ = self.env.reset(seed=self.cfg.seed)
        seq = 1
        await self._publish(obs, seq, True)
        trace = self.cfg.trace.open("w") if self.cfg.trace is not None else None
        try:
            while not stop.is_set():
                if self.cfg.mode == "lockstep":
                    self._written.clear()
                    with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                        await asyncio.wait_for(self._written.wait(), 0.2)
                else:
                    await asyncio.sleep(period)
                if stop.is_set() or not await nodes.run.read_value():
                    continue
                seq = int(await nodes.observation_seq.read_value())  # the PLC side may have been written
                if self.cfg.mode == "lockstep" and int(await nodes.action_seq.read_value()) != seq:
                    continue
                action = self._env_action(await nodes.action.read_value())
                if trace is not None:
                    trace.write(
                        json.dumps(
                            {
                                "seq": seq,
                                "obs": _traced(obs),
                                "action": np.asarray(action, float).reshape(-1).tolist(),
                                "status": int(await nodes.status.read_value()),
                                "t": time.monotonic(),
                            }
                        )
                        + "\n"
                    )
                obs, reward, terminated, truncated, _ = self.env.step(action)
                total += float(reward)
                new_episode = terminated or truncated
                if new_episode:
                    self.returns.append(total)
                    episode += 1
                    _logger.info(
                        "episode %d (seed %d): return %.1f", episode, self.cfg.seed + episode - 1, total
                    )
                    await nodes.episode_returns.write_value(
                        ua.Variant(list(self.returns), ua.VariantType.Double)
                    )
                    await nodes.episodes.write_value(ua.Variant(episode, ua.VariantType.UInt32))
                    if self.cfg.episodes is not None and episode >= self.cfg.episodes:
                        break
                    obs, _ = self.env.reset(seed=self.cfg.seed + episode)
                    total = 0.0
                seq = (seq + 1) % (1 << 32)
                await self._publish(obs, seq, new_episode)
        finally:
            if trace is not None:
                trace.close()
            if self.cfg.record is not None:
                write_json_atomic(
                    self.cfg.record,
                    {
                        "env_id": self.cfg.env_id,
                        "seed": self.cfg.seed,
                        "mode": self.cfg.mode,
                        "returns": self.returns,
                    },
                )
            await self.stop()
        return self.returns


def _dict_keys(space: Any, env_id: str) -> list[tuple[str, int]]:
    """(key, number of values) of a Dict observation space, in its order; [] for a Box."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, Mapping):
        return [(str(key), int(np.prod(sub.shape))) for key, sub in spaces.items()]
    if getattr(space, "shape", None) is None:
        raise ConfigError(f"{env_id}'s observation space {space} is neither a Box nor a Dict of Boxes")
    return []


def _traced(obs: Any) -> Any:
    """An observation as the trace holds it: a list, or a Dict's {key: list}."""
    if isinstance(obs, Mapping):
        return {str(k): np.asarray(v, float).reshape(-1).tolist() for k, v in obs.items()}
    return np.asarray(obs, float).reshape(-1).tolist()


def _refuse_mistyped_writes(server: Server) -> None:
    """Wrap the server's Write service: a value whose shape (or type) is not the node's is refused with
    BadTypeMismatch before asyncua sees it; the others go through as one request."""
    aspace = server.iserver.aspace
    service = server.iserver.attribute_service
    write = service.write

    def problem(wv: ua.WriteValue) -> bool:
        if wv.AttributeId != ua.AttributeIds.Value or wv.Value is None or wv.Value.Value is None:
            return False
        variant = wv.Value.Value
        dtype = aspace.read_attribute_value(wv.NodeId, ua.AttributeIds.DataType).Value
        rank = aspace.read_attribute_value(wv.NodeId, ua.AttributeIds.ValueRank).Value
        dims = aspace.read_attribute_value(wv.NodeId, ua.AttributeIds.ArrayDimensions).Value
        if dtype is None or rank is None:
            return False  # not a variable: asyncua answers for it
        dt = dtype.Value
        builtin = isinstance(dt, ua.NodeId) and dt.NamespaceIndex == 0 and isinstance(dt.Identifier, int)
        if builtin and dt.Identifier <= 25 and ua.VariantType(dt.Identifier) != variant.VariantType:
            return True
        is_array = isinstance(variant.Value, list)
        if rank.Value == -1:
            return is_array
        if rank.Value == 1:
            length = dims.Value[0] if dims is not None and dims.Value else 0
            return not is_array or (length > 0 and len(variant.Value) != length)
        return False

    async def strict_write(params: ua.WriteParameters, user: Any = None) -> list[ua.StatusCode]:
        refused = [problem(wv) for wv in params.NodesToWrite]
        passed = ua.WriteParameters()
        passed.NodesToWrite = [wv for wv, bad in zip(params.NodesToWrite, refused, strict=True) if not bad]
        results = iter(
            await (write(passed) if user is None else write(passed, user=user)) if passed.NodesToWrite else []
        )
        return [ua.StatusCode(ua.StatusCodes.BadTypeMismatch) if bad else next(results) for bad in refused]

    service.write = strict_write
