"""A PLC stand-in on node-opcua (tests/opcua_standin/server.mjs), independent of asyncua, with the plant
(a Gymnasium env) played from Python.

The node process serves what an S7-1500 / Codesys data block looks like over OPC UA: an Object `RL` in
the server's own namespace (`ns=<k>;s=RL`) with typed scalar variables `ns=<k>;s=RL.<Name>`
(`Obs_0..`, `ObsSeq`, `Act_0..`, `ActSeq`, `Heartbeat`, `Status`), or arrays `Obs`/`Act` with
layout="array", or with layout="keys" one node per key of a Dict observation, `Obs_<key>` (an array, a
scalar for a one-value key: a data block's `Lidar : ARRAY[0..23] OF REAL` and `Speed : REAL`) and the
array `Act`. Obs*/ObsSeq are read-only for clients, the rest writable; node-opcua refuses writes of
the wrong DataType (BadTypeMismatch), and the stand-in refuses the wrong shape with the same status.
A Dict env's observation is published as its keys' values concatenated in its key order, so the
"scalar" and "array" layouts serve it too (the flat map of a Dict artifact).

Lockstep handshake: after a client's Write request that wrote ActSeq, if ActSeq == ObsSeq the server
emits one `step` event with the current action; this class steps the env with it and publishes the next
observation (`observe`: values, then ObsSeq + 1, wrapping like the PLC type: DINT 2147483647 -> -2**31).
Episode i is reset with seed S+i, as `rl2edge evaluate --seed S` does.

    with StandinPlc("CartPole-v1", workdir=tmp_path, episodes=2) as plc:
        ...  # point a client at plc.endpoint
        returns = plc.wait_episodes(60)

Protocol with server.mjs (JSON lines): config as its one argument; stdout events `ready`, `step`,
`reply`; stdin commands `observe`, `set`, `reject`, `get`, `stats`, `stop` (see server.mjs). The node
process exits when its stdin closes, so it never outlives this process.

Manual runs / benchmarks:  python testkit/standin_plc.py --env CartPole-v1 --port 4841 [--layout array|keys]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

STANDIN_DIR = Path(__file__).resolve().parents[1] / "tests" / "opcua_standin"
SERVER_JS = STANDIN_DIR / "server.mjs"
DEFAULT_NAMESPACE_URI = "urn:rl2edge:test-plc"
DEFAULT_TYPES = {
    "Obs": "Float",
    "ObsSeq": "Int32",
    "Act": "Int16",
    "ActSeq": "Int32",
    "Heartbeat": "UInt16",
    "Status": "Int16",
}
_REQUEST_TIMEOUT_S = 10.0


class StandinError(RuntimeError):
    """The stand-in could not start, died, or refused a command."""


def _node_opcua_installed() -> bool:
    return (STANDIN_DIR / "node_modules" / "node-opcua" / "package.json").is_file()


class StandinPlc:
    """The node-opcua PLC stand-in plus the plant it controls; a context manager.

    env_id None: no plant (obs_dim/act_dim, or obs_keys, give the node layout); drive it with
    observe()/set(). obs_keys: (key, number of values) of a Dict observation, for layout="keys" without
    an env (with one, they are its observation space's).
    lockstep False: the plant steps every period_ms with whatever action is in the nodes (a free-running
    PLC) instead of once per handshake.
    """

    def __init__(
        self,
        env_id: str | None,
        *,
        seed: int = 0,
        episodes: int | None = None,
        layout: str = "scalar",
        types: Mapping[str, str] | None = None,
        initial: Mapping[str, Any] | None = None,
        extra_namespaces: int = 0,
        namespace_uri: str = DEFAULT_NAMESPACE_URI,
        security: str = "none",
        certificate: Path | str | None = None,
        private_key: Path | str | None = None,
        trusted: Iterable[Path | str] = (),
        workdir: Path | str | None = None,
        lockstep: bool = True,
        period_ms: float = 20.0,
        port: int | None = None,
        host: str = "127.0.0.1",
        obs_dim: int | None = None,
        act_dim: int | None = None,
        obs_keys: Sequence[tuple[str, int]] | None = None,
        min_publishing_interval_ms: float | None = None,
        min_sampling_interval_ms: float | None = None,
        ready_timeout_s: float = 30.0,
    ):
        if layout not in ("scalar", "array", "keys"):
            raise ValueError(f"layout {layout!r}: scalar, array or keys")
        if episodes is not None and episodes < 1:
            raise ValueError("episodes must be at least 1")
        self.env_id, self.seed, self.episodes = env_id, seed, episodes
        self.layout, self.lockstep, self.period_ms = layout, lockstep, period_ms
        self.types = {**DEFAULT_TYPES, **(types or {})}
        self.returns: list[float] = []
        self.endpoint = ""
        self.namespace_index = -1
        self.namespace_uri = namespace_uri

        self.env: Any = None
        self.discrete = False
        if env_id is not None:
            import numpy as np

            from rl2edge.train.core.envs import make_env

            self.env = make_env(env_id)
            space = self.env.action_space
            self.discrete = type(space).__name__ == "Discrete"  # MultiBinary has an `n` too
            obs_space = self.env.observation_space
            if isinstance(getattr(obs_space, "spaces", None), Mapping):  # a Dict: its keys, in order
                obs_keys = [(str(k), int(np.prod(sub.shape))) for k, sub in obs_space.spaces.items()]
            else:
                obs_dim = int(np.prod(obs_space.shape))
            act_dim = 1 if self.discrete else int(np.prod(space.shape))
        self.obs_keys = [(str(k), int(n)) for k, n in obs_keys or ()]
        if self.obs_keys:
            obs_dim = sum(n for _, n in self.obs_keys)
        elif layout == "keys":
            raise ValueError('layout "keys" needs a Dict observation: obs_keys, or an env with a Dict space')
        self.obs_dim, self.act_dim = obs_dim or 4, act_dim or 1

        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="rl2edge-standin-")) if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._config: dict[str, Any] = {
            "host": host,
            "port": 0 if port is None else int(port),
            "namespace_uri": namespace_uri,
            "extra_namespaces": int(extra_namespaces),
            "layout": layout,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "types": self.types,
            "initial": {k: _jsonable(v) for k, v in (initial or {}).items()},
            "security": security,
            "trusted": [str(Path(p).resolve()) for p in trusted],
            "pki_dir": str((self.workdir / "pki").resolve()),
        }
        if layout == "keys":
            self._config["obs_keys"] = [{"name": k, "size": n} for k, n in self.obs_keys]
        if certificate is not None:
            self._config["certificate"] = str(Path(certificate).resolve())
        if private_key is not None:
            self._config["private_key"] = str(Path(private_key).resolve())
        if min_publishing_interval_ms is not None:
            self._config["min_publishing_interval_ms"] = min_publishing_interval_ms
        if min_sampling_interval_ms is not None:
            self._config["min_sampling_interval_ms"] = min_sampling_interval_ms
        self._ready_timeout_s = ready_timeout_s

        self._proc: subprocess.Popen[str] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()  # _pending, _dead
        self._write_lock = threading.Lock()
        self._ready = threading.Event()
        self._ready_info: dict[str, Any] = {}
        self._dead: str | None = None  # why the node process is gone
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=60)
        self._steps_q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._done = threading.Event()
        self._returns_changed = threading.Condition()
        self._error: BaseException | None = None
        self._steps = 0
        self._episode_return = 0.0
        self._closed = False

    # ------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> StandinPlc:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> StandinPlc:
        node = shutil.which("node")
        if node is None:
            raise StandinError(
                "`node` (Node.js >= 20) is not on PATH: the OPC UA stand-in runs on node-opcua"
            )
        if not _node_opcua_installed():
            raise StandinError(
                f"node-opcua is not installed in {STANDIN_DIR / 'node_modules'}: run `make install` "
                f"(or `npm ci --prefix {STANDIN_DIR}`)"
            )
        log = open(self.workdir / "standin.log", "w", encoding="utf-8")  # closed by the stderr reader
        self._proc = subprocess.Popen(
            [node, str(SERVER_JS), json.dumps(self._config)],
            cwd=STANDIN_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self._spawn(self._read_stdout, "standin-stdout")
        self._spawn(self._read_stderr, "standin-stderr", log)
        if not self._ready.wait(self._ready_timeout_s):
            raise StandinError(
                f"the node-opcua stand-in was not ready within {self._ready_timeout_s:.0f} s; "
                f"its stderr ends:\n{self._tail()}"
            )
        if self._dead is not None:
            raise StandinError(
                f"the node-opcua stand-in failed to start ({self._dead}); stderr:\n{self._tail()}"
            )
        self.endpoint = self._ready_info["endpoint"]
        self.namespace_index = int(self._ready_info["namespace_index"])
        self.namespace_uri = self._ready_info["namespace_uri"]
        if self.env is not None:
            obs, _ = self.env.reset(seed=self.seed)
            self.observe(obs, episode_start=True)
            self._spawn(self._plant_lockstep if self.lockstep else self._plant_realtime, "standin-plant")
        return self

    def close(self) -> None:
        """Stop the server (the stop command, then a kill after a timeout) and the plant; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._steps_q.put(None)
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(Exception):
                    self._request("stop", timeout=5.0)
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()  # type: ignore[union-attr]
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5.0)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(5.0)
        if self.env is not None:
            with contextlib.suppress(Exception):
                self.env.close()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._done.set()

    def kill(self) -> None:
        """SIGKILL the server (a power cut: no goodbye to its clients), then clean up as close() does."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self.close()

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    # ------------------------------------------------------------------------------------ commands
    def observe(self, obs: Any, episode_start: bool | None = None) -> Any:
        """Publish an observation (values converted to the Obs type), then ObsSeq + 1; returns ObsSeq.
        A Dict observation (a mapping) goes in as its keys' values concatenated in key order. With
        `episode_start`, the EpisodeStart node is set to it before ObsSeq moves (the plant sets it True on
        each episode's first observation)."""
        if isinstance(obs, Mapping):
            obs = [v for key, _ in self.obs_keys for v in _flat(obs[key])]
        values = [_jsonable(v) for v in _flat(obs)]
        flag = {} if episode_start is None else {"episode_start": bool(episode_start)}
        return self._request("observe", obs=values, **flag)

    def set(self, node: str, value: Any = None, status: str = "Good") -> Any:
        """Set a node's value (None: keep it) and StatusCode, as the PLC program would; returns the value."""
        return self._request("set", node=node, value=_jsonable(value), status=status)

    def reject(self, node: str, status: str | None) -> None:
        """From now on client writes to `node` fail with `status` (value unchanged); None: accept again."""
        self._request("reject", node=node, status=status)

    def get(self) -> dict[str, Any]:
        """{name: value} of every variable of the RL object."""
        return self._request("get")

    def stats(self) -> dict[str, Any]:
        """sessions, subscriptions, monitored_items, revised_publishing_intervals, writes {ok, rejected, accepted: {name: count}}, steps."""
        return self._request("stats")

    @property
    def steps(self) -> int:
        """Env steps the plant has taken, each counted once the next observation is published."""
        return self._steps

    @property
    def finished(self) -> bool:
        """The episodes asked for are done (or the stand-in is closed)."""
        return self._done.is_set()

    @property
    def error(self) -> BaseException | None:
        """What stopped the plant, if anything did."""
        return self._error

    def wait_episodes(self, timeout: float, count: int | None = None) -> list[float]:
        """Wait until `count` (default: `episodes`) episodes are done; returns their returns."""
        count = self.episodes if count is None else count
        if count is None:
            raise ValueError("wait_episodes needs count, or episodes= at construction")
        deadline = time.monotonic() + timeout
        with self._returns_changed:
            while len(self.returns) < count and self._error is None and self._dead is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"{len(self.returns)} of {count} episodes done after {timeout:.0f} s "
                        f"({self._steps} env steps; stats {self._safe_stats()})"
                    )
                self._returns_changed.wait(min(left, 0.5))
        if self._error is not None:
            raise StandinError(f"the plant failed: {self._error!r}") from self._error
        if len(self.returns) < count:
            raise StandinError(f"the node-opcua stand-in died ({self._dead}); stderr:\n{self._tail()}")
        return list(self.returns[:count])

    # ------------------------------------------------------------------------------------ node ids
    def node_id(self, name: str, *, nsu: bool = False) -> str:
        """`ns=<k>;s=RL.<name>`, or with nsu=True `nsu=<uri>;s=RL.<name>` (survives the index moving)."""
        prefix = f"nsu={self.namespace_uri}" if nsu else f"ns={self.namespace_index}"
        return f"{prefix};s=RL.{name}"

    def node_map(self, *, nsu: bool = True, episode_start: bool = False) -> dict[str, Any]:
        """The node-map fields (observation, observation_seq, action, ...) for this layout; layout "keys":
        the observation per key ({key: node}); `episode_start`: map the EpisodeStart flag too."""
        observation: Any
        if self.layout == "scalar":
            observation = [self.node_id(f"Obs_{i}", nsu=nsu) for i in range(self.obs_dim)]
            act = [f"Act_{i}" for i in range(self.act_dim)]
        elif self.layout == "array":
            observation, act = [self.node_id("Obs", nsu=nsu)], ["Act"]
        else:
            observation = {key: self.node_id(f"Obs_{key}", nsu=nsu) for key, _ in self.obs_keys}
            act = ["Act"]
        return {
            "observation": observation,
            "observation_seq": self.node_id("ObsSeq", nsu=nsu),
            "action": [self.node_id(n, nsu=nsu) for n in act],
            "action_seq": self.node_id("ActSeq", nsu=nsu),
            "heartbeat": self.node_id("Heartbeat", nsu=nsu),
            "status": self.node_id("Status", nsu=nsu),
            **({"episode_start": self.node_id("EpisodeStart", nsu=nsu)} if episode_start else {}),
        }

    # ------------------------------------------------------------------------------------ plumbing
    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _tail(self) -> str:
        time.sleep(0.05)  # let the stderr reader catch up with a dying process
        return "\n".join(self._stderr_tail) or "(nothing)"

    def _safe_stats(self) -> Any:
        try:
            return self.stats()
        except Exception as exc:
            return f"unavailable: {exc}"

    def _request(self, cmd: str, timeout: float = _REQUEST_TIMEOUT_S, **fields: Any) -> Any:
        proc = self._proc
        if proc is None:
            raise StandinError("the stand-in is not started")
        rid = next(self._ids)
        slot: dict[str, Any] = {"event": threading.Event()}
        with self._lock:
            if self._dead is not None:
                raise StandinError(f"the node-opcua stand-in is gone ({self._dead}); stderr:\n{self._tail()}")
            self._pending[rid] = slot
        line = json.dumps({"cmd": cmd, "id": rid, **fields}) + "\n"
        try:
            with self._write_lock:
                proc.stdin.write(line)  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            if not slot["event"].wait(timeout):
                raise StandinError(f"no reply to {cmd!r} within {timeout:.0f} s; stderr:\n{self._tail()}")
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise StandinError(
                f"{cmd!r}: the node-opcua stand-in is gone ({exc}); stderr:\n{self._tail()}"
            ) from None
        finally:
            with self._lock:
                self._pending.pop(rid, None)
        if "dead" in slot:
            raise StandinError(
                f"{cmd!r}: the node-opcua stand-in died ({slot['dead']}); stderr:\n{self._tail()}"
            )
        if slot.get("error") is not None:
            raise StandinError(f"{cmd!r} refused: {slot['error']}")
        return slot.get("result")

    def _read_stdout(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                self._stderr_tail.append(f"(non-JSON on stdout) {line.rstrip()}")
                continue
            event = msg.get("event")
            if event == "reply":
                with self._lock:
                    slot = self._pending.get(msg.get("id"))
                if slot is not None:
                    slot["result"], slot["error"] = msg.get("result"), msg.get("error")
                    slot["event"].set()
            elif event == "step":
                self._steps_q.put(msg)
            elif event == "ready":
                self._ready_info = msg
                self._ready.set()
        rc = proc.wait()
        with self._lock:
            self._dead = f"exit status {rc}"
            for slot in self._pending.values():
                slot["dead"] = self._dead
                slot["event"].set()
        self._ready.set()
        self._steps_q.put(None)
        with self._returns_changed:
            self._returns_changed.notify_all()

    def _read_stderr(self, log: Any) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        with log:
            for line in proc.stderr:
                log.write(line)
                log.flush()
                self._stderr_tail.append(line.rstrip())

    # ------------------------------------------------------------------------------------ the plant
    def _env_action(self, action: list[Any]) -> Any:
        import numpy as np

        space = self.env.action_space
        if self.discrete:
            return int(action[0])
        if not hasattr(space, "low"):  # MultiDiscrete/MultiBinary: one index per component, as written
            return np.asarray([round(float(v)) for v in action], space.dtype).reshape(space.shape)
        a = np.asarray([float(v) for v in action], np.float32).reshape(space.shape)
        return np.clip(a, space.low, space.high).astype(space.dtype)

    def _env_step(self, action: list[Any]) -> bool:
        """One env step and the next observation; False once the episodes asked for are done.
        `steps` counts a step once its observation is published (or its episode was the last)."""
        obs, reward, terminated, truncated, _ = self.env.step(self._env_action(action))
        self._episode_return += float(reward)
        if terminated or truncated:
            with self._returns_changed:
                self.returns.append(self._episode_return)
                self._returns_changed.notify_all()
            self._episode_return = 0.0
            if self.episodes is not None and len(self.returns) >= self.episodes:
                self._steps += 1
                self._done.set()
                return False
            obs, _ = self.env.reset(seed=self.seed + len(self.returns))
        self.observe(obs, episode_start=terminated or truncated)
        self._steps += 1
        return True

    def _plant_failed(self, exc: BaseException) -> None:
        if not self._stop.is_set():
            self._error = exc
        with self._returns_changed:
            self._returns_changed.notify_all()

    def _plant_lockstep(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self._steps_q.get()
                if msg is None or self._stop.is_set():
                    return
                if not self._env_step(msg["action"]):
                    return
        except BaseException as exc:
            self._plant_failed(exc)

    def _plant_realtime(self) -> None:
        act_names = ["Act"] if self.layout != "scalar" else [f"Act_{i}" for i in range(self.act_dim)]
        try:
            while not self._stop.wait(self.period_ms / 1e3):
                values = self.get()
                action = values["Act"] if self.layout != "scalar" else [values[n] for n in act_names]
                if not self._env_step(action):
                    return
        except BaseException as exc:
            self._plant_failed(exc)


def _flat(values: Any) -> list[Any]:
    if hasattr(values, "reshape"):
        return list(values.reshape(-1).tolist())
    return list(values)


def _jsonable(v: Any) -> Any:
    """numpy scalars -> Python; non-finite floats -> strings server.mjs understands (JSON has no NaN)."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if hasattr(v, "tolist"):
        return _jsonable(v.tolist())
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, int) and abs(v) > 2**53:
        return str(v)  # JavaScript's JSON.parse would round it; server.mjs reads decimal strings exactly
    return v


# ---------------------------------------------------------------------------------------------- CLI
def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run the node-opcua PLC stand-in around a Gymnasium env.")
    p.add_argument("--env", required=True, help="Gymnasium id, e.g. CartPole-v1")
    p.add_argument("--port", type=int, default=4841)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument(
        "--layout",
        choices=("scalar", "array", "keys"),
        default="scalar",
        help="keys: one node per key of a Dict observation",
    )
    p.add_argument("--episodes", type=int, help="stop answering after this many episodes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--extra-namespaces", type=int, default=0)
    p.add_argument("--types", help='JSON, e.g. \'{"Act": "Int32"}\'')
    p.add_argument("--realtime", action="store_true", help="step every --period-ms, not per handshake")
    p.add_argument("--period-ms", type=float, default=20.0)
    p.add_argument("--min-publishing-interval-ms", type=float, help="node-opcua's default: 50")
    p.add_argument("--min-sampling-interval-ms", type=float, help="node-opcua's default: 50")
    p.add_argument("--workdir", help="PKI folder and standin.log (default: a temporary folder)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `train` from a source checkout

    with StandinPlc(
        args.env,
        seed=args.seed,
        episodes=args.episodes,
        layout=args.layout,
        types=json.loads(args.types) if args.types else None,
        extra_namespaces=args.extra_namespaces,
        lockstep=not args.realtime,
        period_ms=args.period_ms,
        port=args.port,
        host=args.host,
        min_publishing_interval_ms=args.min_publishing_interval_ms,
        min_sampling_interval_ms=args.min_sampling_interval_ms,
        workdir=args.workdir,
    ) as plc:
        print(f"endpoint {plc.endpoint}  namespace {plc.namespace_index} = {plc.namespace_uri}", flush=True)
        print(json.dumps({"node_map": plc.node_map()}, indent=2), flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        seen = 0
        try:
            while plc.returncode is None and plc.error is None and not plc.finished:
                time.sleep(0.2)
                while seen < len(plc.returns):
                    print(f"episode {seen + 1} (seed {args.seed + seen}): return {plc.returns[seen]:.1f}")
                    seen += 1
        except KeyboardInterrupt:
            pass
        while seen < len(plc.returns):
            print(f"episode {seen + 1} (seed {args.seed + seen}): return {plc.returns[seen]:.1f}")
            seen += 1
        if plc.error is not None:
            print(f"plant failed: {plc.error!r}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
