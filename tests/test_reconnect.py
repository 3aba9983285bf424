"""A pulled cable, three times: the loop reconnects each time and the PLC never holds more than the one
live session (nothing leaks across reconnects). A real server behind a real TCP proxy on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from rl2edge.plc_bridge.client import BridgeConfig
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.sim import PlcSim, SimConfig
from rl2edge.runtime import Policy
from testkit.plc import free_port


class CablePuller:
    """Forwards TCP from a local port to the PLC; `pull()` cuts every live connection at once; `hang()`
    holds every byte (connections stay open, nothing is answered) until `resume()`: a PLC whose CPU
    stopped or whose network froze."""

    def __init__(self, listen: int, target: int):
        self.listen, self.target = listen, target
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.base_events.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()

    def hang(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    await self._flowing.wait()
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def pull(self) -> None:
        for w in self._writers:
            w.transport.abort()
        self._writers.clear()

    async def stop(self) -> None:
        self.pull()
        if self._server is not None:
            self._server.close()


@contextlib.asynccontextmanager
async def _plc_behind_a_proxy(artifact: Path, request_timeout_s: float, cfg: LoopConfig):
    """plc-sim (realtime, 20 ms) behind a CablePuller, and a ControlLoop serving it through the proxy;
    yields (sim, proxy, loop, the loop's task) and stops everything; the loop's summary is the task's."""
    plc_port, proxy_port = free_port(), free_port()
    sim = PlcSim(
        SimConfig("CartPole-v1", endpoint=f"opc.tcp://127.0.0.1:{plc_port}", mode="realtime", period_ms=20)
    )
    stop_sim, stop_loop = asyncio.Event(), asyncio.Event()
    sim_task = asyncio.create_task(sim.run(stop_sim))
    await _until(lambda: sim.server is not None)
    proxy = CablePuller(proxy_port, plc_port)
    await proxy.start()
    bridge = BridgeConfig(f"opc.tcp://127.0.0.1:{proxy_port}", request_timeout_s=request_timeout_s)
    loop = ControlLoop(Policy.load(artifact), bridge, cfg)
    loop_task = asyncio.create_task(loop.run(stop_loop))
    try:
        yield sim, proxy, loop, loop_task
    finally:
        stop_loop.set()
        await loop_task
        await proxy.stop()
        stop_sim.set()
        await sim_task


async def _scenario(artifact: Path) -> tuple[dict, list[int]]:
    sessions = []
    cfg = LoopConfig(period_ms=10, backoff_initial_s=0.05)
    async with _plc_behind_a_proxy(artifact, 0.5, cfg) as (sim, proxy, loop, loop_task):

        async def cycles_reach(n: int) -> None:
            await _until(lambda: loop.counters.cycles >= n)

        for k in range(3):
            await asyncio.wait_for(cycles_reach(loop.counters.cycles + 20), 30)
            sessions.append(len(sim.server.iserver._external_sessions))
            proxy.pull()
            await asyncio.wait_for(_until(lambda k=k: loop.counters.reconnects > k), 30)
        await asyncio.wait_for(cycles_reach(loop.counters.cycles + 20), 30)
        await asyncio.sleep(0.3)  # let the server finish closing sessions of cut connections
        sessions.append(len(sim.server.iserver._external_sessions))
    return loop_task.result(), sessions


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.02)


def test_pulled_cable_reconnects_without_leaking_sessions(cartpole_all) -> None:
    _, root = cartpole_all
    summary, sessions = asyncio.run(_scenario(root / "fp32"))
    assert summary["connection_losses"] == 3 and summary["reconnects"] == 3
    assert sessions == [1, 1, 1, 1]


async def _hang_scenario(artifact: Path) -> tuple[dict, list[tuple[int, int, int]], int]:
    """A PLC that stops answering with its TCP connection open, twice: 0.3 s (the late answer arrives
    within the 1 s request timeout) and 1.6 s (the session is given up and reopened)."""
    cfg = LoopConfig(period_ms=10, deadline_ms=50, backoff_initial_s=0.05)
    async with _plc_behind_a_proxy(artifact, 1.0, cfg) as (_, proxy, loop, loop_task):
        seen = []  # (misses while hung, connection losses while hung, ok cycles after)
        for hang_s in (0.3, 1.6):
            await asyncio.wait_for(_until(lambda n=loop.counters.ok + 20: loop.counters.ok >= n), 30)
            misses = loop.counters.deadline_misses
            proxy.hang()
            await asyncio.sleep(0.2)  # past the 50 ms deadline, well before the 1 s request timeout
            hung = (loop.counters.deadline_misses - misses, loop.counters.connection_losses)
            await asyncio.sleep(hang_s - 0.2)
            proxy.resume()
            ok = loop.counters.ok
            await asyncio.wait_for(_until(lambda ok=ok: loop.counters.ok >= ok + 20), 30)
            seen.append((*hung, loop.counters.deadline_misses - misses))
    return loop_task.result(), seen, loop.counters.cycles


def test_a_hung_plc_is_a_deadline_miss_when_the_deadline_passes(cartpole_all, caplog) -> None:
    """Before: nothing was counted until the 1 s request timeout, and then only as a lost connection."""
    _, root = cartpole_all
    with caplog.at_level("WARNING", logger="rl2edge.plc_bridge.loop"):
        summary, seen, _ = asyncio.run(_hang_scenario(root / "fp32"))
    (short_while, short_losses, short_total), (long_while, long_losses, long_total) = seen
    assert short_while == 1 and short_losses == 0 and short_total == 1  # counted once, at the deadline
    assert long_while == 1 and long_losses == 0  # counted before the session was given up
    assert long_total >= 1 and summary["connection_losses"] == 1 and summary["reconnects"] == 1
    # the proxy may freeze while the read or the write of a cycle is in flight
    assert re.search(
        r"DEADLINE_MISS: the cycle was still waiting for its (read|write) 50 ms after its start", caplog.text
    )
    # every counted cycle has exactly one status
    c = summary
    assert (
        c["cycles"]
        == c["ok"]
        + c["invalid"]
        + c["stale"]
        + c["inference_errors"]
        + c["write_rejected"]
        + c["deadline_misses"]
    )
