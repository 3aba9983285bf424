"""Helpers for the OPC UA tests: free loopback ports, real plc-sim and serve processes, a PLC-side client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from asyncua import Client, ua

from rl2edge.ports import free_port
from testkit.cli import EXE

__all__ = ["free_port"]  # re-exported: tests and benchmarks import it from here


# The edge test run (`make test-edge`) serves from the edge venv and runs plc-sim, which needs gymnasium,
# from the workstation's.
PLC_SIM_EXE = os.environ.get("RL2EDGE_PLC_SIM_EXE", EXE)

# serve's flags for a test that compares a served closed loop with `evaluate` exactly: a deadline miss
# writes the safe action, which a busy machine makes at any deadline a cycle can really have. With a
# lockstep plant (it steps only on an answer) nothing waits on the clock, so the deadline can be the
# longest serve takes; the test still asserts that the summary counted no miss.
NO_MISS = ("--deadline-ms", "60000")


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    exe = PLC_SIM_EXE if args[:1] == ["plc-sim"] else EXE
    return subprocess.Popen(
        [exe, *args], stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout=timeout)


@contextlib.contextmanager
def running(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = start(args, log, env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def wait_for_server(url: str, timeout: float = 30.0) -> None:
    async def probe() -> bool:
        try:
            async with Client(url, timeout=1) as c:
                await c.get_node("ns=2;s=rl2edge.ObservationSeq").read_value()
                return True
        except Exception:
            return False

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if asyncio.run(probe()):
            return
        time.sleep(0.3)
    raise TimeoutError(f"no OPC UA server at {url} after {timeout} s")


def node(name: str) -> str:
    return f"ns=2;s=rl2edge.{name}"


async def read(client: Client, *names: str) -> list[Any]:
    return await client.read_values([client.get_node(node(n)) for n in names])


async def write(client: Client, **values: ua.Variant) -> None:
    await client.write_values(
        [client.get_node(node(k)) for k in values], [ua.DataValue(v) for v in values.values()]
    )


async def wait_until(client: Client, name: str, predicate: Any, within_s: float = 10.0) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        (value,) = await read(client, name)
        if predicate(value):
            return value
        await asyncio.sleep(0.02)
    raise TimeoutError(f"{name} never satisfied the condition; last value {value!r}")


def episode_start_map(directory: Path) -> Path:
    """plc-sim's nodes, with its EpisodeStart flag mapped as the node map's episode_start."""
    import yaml

    from rl2edge.plc_bridge.layout import node_id

    names = ("Observation", "ObservationSeq", "Action", "ActionSeq", "Heartbeat", "Status", "EpisodeStart")
    keys = ("observation", "observation_seq", "action", "action_seq", "heartbeat", "status", "episode_start")
    node_map = directory / "plant.yaml"
    node_map.write_text(yaml.safe_dump({k: node_id(n) for k, n in zip(keys, names, strict=True)}))
    return node_map


def served_returns(
    artifact: Path, env_id: str, episodes: int, seed: int, work: Path, *, episode_start: bool = False
) -> list[float]:
    """The episode returns of `artifact` served by `rl2edge serve` to plc-sim in lockstep on loopback (with
    plc-sim's EpisodeStart flag mapped for a stateful artifact): what evaluate's returns on the same seeds
    must equal."""
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    record = work / "returns.json"
    sim_args = ["plc-sim", "--env", env_id, "--endpoint", url, "--mode", "lockstep", "--seed", str(seed)]
    with running(
        [*sim_args, "--episodes", str(episodes), "--record", str(record), "--strict"], work / "sim.log"
    ) as sim:
        wait_for_server(url)
        serve_args = ["serve", str(artifact), "--endpoint", url, "--period-ms", "5", *NO_MISS]
        if episode_start:
            serve_args += ["--map", str(episode_start_map(work))]
        with running(serve_args, work / "serve.log") as serve:
            assert sim.wait(timeout=300) == 0, (work / "sim.log").read_text()
            assert stop(serve) == 0, (work / "serve.log").read_text()
    return list(json.loads(record.read_text())["returns"])
