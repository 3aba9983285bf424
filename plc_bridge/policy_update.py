"""A policy update without stopping the line: `rl2edge serve --watch` and SIGHUP.

A request (the watched artifact path changed, or SIGHUP) starts an update:
1. load: the artifact the path points to now is loaded and checked in a worker thread, off the control
   path (manifest and file hashes, the model's structure, one run in a child process);
2. fit: its observation and action specs must be the serving policy's (the node map and the PLC's nodes
   were checked against those);
3. shadow: for `shadow_cycles` cycles it runs on the live observation after the serving policy's
   action has been written, and its actions are compared (discrete: the share of equal actions; Box: the
   difference as a share of each action's range); nothing it computes is written. Each observation is
   checked with the new artifact's own bounds: an update under which more than `max_invalid` of the
   live observations would be invalid (the line held on the safe action) is refused, naming the value;
4. takeover: if the shadow run passes, it serves from the start of the next cycle (a swap of references;
   its interpreter is loaded and warm).
Any failure leaves the serving policy serving and is logged, counted and recorded in the summary. A
rollback (point the path back at an artifact that served before in this run) is known-good: it is loaded
and fitted, then takes over without a shadow run. A newer request replaces an update still in its shadow
run. Every file read is bounded (regular files, size-checked before reading) and every blocking step runs
in its own daemon thread under a timeout, so a wedged file system refuses that update and never blocks the
next one or the exit. Each candidate runs in its own model process (runtime.model_process): a model
that crashes costs that process, and the shadow run refuses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from rl2edge.errors import BackendError, ConfigError, ManifestError, ObservationError, Rl2EdgeError
from rl2edge.fileio import read_regular_file
from rl2edge.plc_bridge.hooks import CycleOutcome
from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.observation_guard import Serving
from rl2edge.plc_bridge.snapshot import UpdateState
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.manifest import MANIFEST_FILE
from rl2edge.runtime.manifest_schema import MAX_MANIFEST_BYTES
from rl2edge.runtime.policy import Policy

_logger = logging.getLogger(__name__)

MAX_RECORDS = 100
"""Updates kept in the summary: the newest, so that a service running for months keeps a bounded file."""
LOAD_TIMEOUT_S = 180.0
"""Reading, checking and starting a candidate's model process (runtime.model_process allows 120 s for the
last): past this the update is refused and the thread left behind (a daemon: it blocks nothing)."""
WATCH_TIMEOUT_S = 10.0
"""One look at the watched path; a file system that takes longer skips that poll."""


@dataclass(frozen=True)
class UpdateConfig:
    artifact: Path
    """The path serve was given (typically a symlink such as /opt/rl2edge/current that the deployer
    swaps atomically); every update loads what it points to at that moment."""
    load: Callable[[Path], Policy]
    """Policy.load with serve's backend, threads and noise options."""
    watch: bool = False
    poll_s: float = 1.0
    shadow_cycles: int = 50
    min_agreement: float = 0.9
    """Discrete actions: the shadow run passes if at least this share of its actions equal the served ones."""
    max_action_diff: float = 0.1
    """Box actions: it passes if the mean over its cycles of the largest |new - served| / (high - low) is
    at most this."""
    patience: int = 10
    """An update whose shadow run saw fewer than shadow_cycles valid observations in patience x
    shadow_cycles cycles is refused (the plant is faulted or stopped: nothing to judge it on)."""
    max_invalid: float = 0.02
    """The shadow run refuses an update under whose own observation bounds more than this share of the live
    observations would be invalid: it would hold the line on the safe action."""

    def check(self) -> None:
        if self.shadow_cycles < 0:
            raise ConfigError(f"--shadow-cycles {self.shadow_cycles}: choose 0 (no shadow run) or more")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError(f"--shadow-min-agreement {self.min_agreement:g}: choose a share from 0 to 1")
        if not 0.0 <= self.max_action_diff <= 1.0:
            raise ConfigError(
                f"--shadow-max-diff {self.max_action_diff:g}: choose a share of the range, 0 to 1"
            )
        if not 0.0 <= self.max_invalid <= 1.0:
            raise ConfigError(f"max_invalid {self.max_invalid:g}: choose a share from 0 to 1")
        if not 0.05 <= self.poll_s <= 3600:
            raise ConfigError(f"--watch-interval {self.poll_s:g}: choose 0.05 to 3600 s")


@dataclass
class _Shadow:
    serving: Serving
    artifact: Path
    digest: str
    load_s: float
    compared: int = 0
    agreed: int = 0
    diff_sum: float = 0.0
    diff_max: float = 0.0
    cycles: int = 0
    checked: int = 0
    """Live observations checked with the candidate's own guard, and those it found invalid."""
    invalid: int = 0
    first_invalid: str = ""
    last_sequence: Any = None
    """A stateful candidate: the sequence number it last ran on (its state advances once per plant step)."""

    def result(self, discrete: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"cycles": self.compared, "checked": self.checked, "invalid": self.invalid}
        if self.compared:
            if discrete:
                out["agreement"] = self.agreed / self.compared
            else:
                out["mean_action_diff"] = self.diff_sum / self.compared
                out["max_action_diff"] = self.diff_max
        return out


class PolicyUpdates:
    """Runs the updates of one control loop: the update part of its hooks (plc_bridge.hooks.LoopHooks),
    which the loop asks at the start of each cycle whether a verified policy takes over, and shows each
    cycle's outcome for the shadow run."""

    def __init__(self, policy: Policy, cfg: UpdateConfig, prepare: Callable[[Policy, Policy], Serving]):
        """`policy`: the one serving at start. `prepare(candidate, serving)`: what serving the candidate
        takes in place of the serving policy, or a ConfigError why it does not fit the loop
        (plc_bridge.observation_guard.prepare_serving with the loop's node map)."""
        cfg.check()
        self.cfg, self._prepare = cfg, prepare
        self.policy = policy
        """The serving policy: the one at start, then each that took over."""
        self.cycles = 0
        """Cycles the loop completed, as last told."""
        # What serves: the folder it was loaded from, not where the path points now (a deployer may have
        # swapped it since the load).
        self.serving_artifact = policy.manifest.real or _real(policy.manifest.path)
        self.serving_digest = _manifest_digest(self.serving_artifact)
        self.served: set[str] = {self.serving_digest}
        """Manifest digests that served in this run: a rollback to one of them is known-good."""
        self.records: list[dict[str, Any]] = []
        self._last: Mapping[str, Any] = MappingProxyType({})
        self.counts = {"accepted": 0, "refused": 0, "unchanged": 0, "superseded": 0}
        self.latency = LatencyHistogram()
        """Cycles while an update was under way (load, shadow run, takeover cycle): the swap's cost."""
        self.latency_other = LatencyHistogram()
        """The other cycles, to set that cost against."""
        self.misses_during = 0
        self.last_shadow: dict[str, Any] = {}
        self._wake = asyncio.Event()
        self._reason = ""
        self._loading = False
        self._shadow: _Shadow | None = None
        self._ready: _Shadow | None = None
        self._first_cycle_of: dict[str, Any] | None = None
        self._watched: tuple[Any, ...] | None = None

    # ------------------------------------------------------------------------------------ requests
    def request(self, reason: str) -> None:
        """Start an update (SIGHUP, the watched path changing); safe from signal handlers."""
        self._reason = reason
        self._wake.set()

    @property
    def active(self) -> bool:
        return self._loading or self._shadow is not None or self._ready is not None

    async def run(self, stop: asyncio.Event) -> None:
        """The update task, beside the control loop until `stop`."""
        watcher = asyncio.ensure_future(self._watch(stop)) if self.cfg.watch else None
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                woken = asyncio.ensure_future(self._wake.wait())
                await asyncio.wait((woken, stopping), return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if stop.is_set():
                    break
                self._wake.clear()
                try:
                    await self._consider(self._reason)
                except (
                    Exception
                ) as exc:  # an interpreter's own exception type, say: refuse, never stop updating
                    self._loading = False
                    self._refuse(self.cfg.artifact, None, f"unexpected {type(exc).__name__}: {exc}")
        finally:
            stopping.cancel()
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    async def _watch(self, stop: asyncio.Event) -> None:
        """Poll the artifact path: where it points, and the manifest's and model's inode and mtime. The first
        look is compared with the artifact that serves, not taken as the baseline: a deployer that swapped
        the path between serve's load and this task's start (an OTA install while serve boots) is an update."""
        with contextlib.suppress(TimeoutError):
            self._watched = await _off_loop(WATCH_TIMEOUT_S, _watch_key, self.serving_artifact)
        while not stop.is_set():
            await asyncio.sleep(self.cfg.poll_s)
            try:
                key = await _off_loop(WATCH_TIMEOUT_S, _watch_key, self.cfg.artifact)
            except TimeoutError:
                _logger.warning("watching %s: no answer in %g s; next look in %g s",
                                self.cfg.artifact, WATCH_TIMEOUT_S, self.cfg.poll_s)  # fmt: skip
                continue
            if key != self._watched:
                self._watched = key
                self.request(f"{self.cfg.artifact} changed")

    # ------------------------------------------------------------------------------------ load, fit
    async def _consider(self, reason: str) -> None:
        if self._shadow is not None:
            self._record(
                "superseded", self._shadow.artifact, self._shadow.digest, "a newer update was requested"
            )
            self._shadow.serving.policy.close()
            self._shadow = None
        self._loading = True
        target = self.cfg.artifact
        try:
            t0 = time.perf_counter()
            try:
                target, digest = await _off_loop(LOAD_TIMEOUT_S, _identify, self.cfg.artifact)
                _logger.info("policy update (%s): loading %s", reason, target)
                if digest == self.serving_digest and target == self.serving_artifact:
                    self.counts["unchanged"] += 1
                    _logger.info("policy update: %s is the serving artifact; nothing to do", target)
                    return
                policy = await _off_loop(LOAD_TIMEOUT_S - (time.perf_counter() - t0), self.cfg.load, target)
                try:
                    serving = self._prepare(policy, self.policy)
                except Rl2EdgeError:
                    policy.close()
                    raise
            except Rl2EdgeError as exc:
                self._refuse(target, None, str(exc))
                return
            except TimeoutError:  # before OSError, its base class
                self._refuse(target, None, f"reading and loading it took over {LOAD_TIMEOUT_S:g} s")
                return
            except OSError as exc:
                self._refuse(target, None, f"cannot read it ({exc.strerror or exc})")
                return
            shadow = _Shadow(serving, target, digest, time.perf_counter() - t0)
            if digest in self.served:  # a rollback: it served in this run, and is known-good
                _logger.info("policy update: %s served before in this run; it takes over without a shadow run",
                             target)  # fmt: skip
                self._ready = shadow
            elif self.cfg.shadow_cycles == 0:
                self._ready = shadow
            else:
                self._shadow = shadow
                _logger.info(
                    "policy update: %s loaded and fits (%.2f s); shadow run over %d cycles",
                    target,
                    shadow.load_s,
                    self.cfg.shadow_cycles,
                )
        finally:
            self._loading = False

    # ------------------------------------------------------------------------------- in the loop
    def before_cycle(self, cycles: int) -> Serving | None:
        """At the start of a cycle (`cycles` completed so far): a candidate that passed takes over now; the
        loop serves what this returns from this cycle on."""
        self.cycles = cycles
        ready, self._ready = self._ready, None
        if ready is None:
            return None
        old, old_policy = self.serving_artifact, self.policy
        self.policy = ready.serving.policy
        old_policy.close()  # its model process: nothing runs it any more (the loop serves the new one now)
        rollback = ready.digest in self.served
        self.served.add(ready.digest)
        self.serving_artifact, self.serving_digest = ready.artifact, ready.digest
        record = self._record("accepted", ready.artifact, ready.digest, "", first_cycle=cycles + 1)
        record.update(
            replaced=str(old),
            load_s=round(ready.load_s, 3),
            shadow=None if rollback else ready.result(self.policy.categorical),
            rollback=rollback,
        )
        self._first_cycle_of = record
        _logger.info("policy update: %s serves from cycle %d on", ready.artifact, record["first_cycle"])
        return ready.serving

    def after_cycle(self, outcome: CycleOutcome) -> None:
        """After a cycle's write: account for the swap's cycles, and run the shadow. The observation as
        read from the PLC (None when its quality was bad) is checked with the candidate's own guard."""
        status, raw, action = outcome.status, outcome.observation, outcome.action
        seq, latency_ms = outcome.sequence, outcome.latency_ms
        self.cycles = outcome.cycles
        during = self.active or self._first_cycle_of is not None
        if self._first_cycle_of is not None:  # the takeover cycle
            self._first_cycle_of["first_sequence"] = seq if status == CycleStatus.OK else None
            self._first_cycle_of["first_status"] = status.name
            self._first_cycle_of["takeover_latency_ms"] = round(latency_ms, 3)
            self._first_cycle_of = None
        (self.latency if during else self.latency_other).add(latency_ms)
        self.misses_during += int(during and status == CycleStatus.DEADLINE_MISS)
        shadow = self._shadow
        if shadow is None:
            return
        shadow.cycles += 1
        if raw is not None and status in (CycleStatus.OK, CycleStatus.INVALID_OBSERVATION):
            obs, problem = shadow.serving.guard.check(raw)  # the candidate's own bounds and tolerance
            shadow.checked += 1
            if obs is None:
                shadow.invalid += 1
                shadow.first_invalid = shadow.first_invalid or problem
            elif shadow.serving.policy.states and seq == shadow.last_sequence:
                pass  # a stateful candidate saw this plant step already: its state must not advance twice
            else:
                if shadow.serving.policy.states and outcome.episode_start:
                    shadow.serving.policy.reset()  # the PLC's episode start, as the serving policy had it
                shadow.last_sequence = seq
                try:
                    new = shadow.serving.policy.predict(obs, validated=True)
                    # what the serving policy answered, or would have (the line held on the safe action by
                    # its bounds is what a corrected artifact is deployed to end); never asked of a stateful
                    # serving policy, whose state would advance on an observation it did not serve
                    served = (
                        action
                        if status == CycleStatus.OK
                        else None
                        if self.policy.states
                        else self._serving_action(obs)
                    )
                except (BackendError, ObservationError) as exc:
                    self._shadow = None
                    self._refuse(shadow.artifact, shadow.digest, f"it failed on a live observation: {exc}")
                    shadow.serving.policy.close()
                    return
                if served is not None:
                    self._compare(shadow, new, served)
        locks = (
            shadow.checked >= self.cfg.shadow_cycles
            and shadow.invalid > self.cfg.max_invalid * shadow.checked
        )
        if shadow.compared >= self.cfg.shadow_cycles or locks:
            self._shadow = None
            self._judge(shadow)
        elif shadow.cycles >= self.cfg.patience * self.cfg.shadow_cycles:
            self._shadow = None
            why = (
                f"only {shadow.compared} of {shadow.cycles} cycles had a valid observation to shadow-run it on "
                f"({self.cfg.shadow_cycles} needed)"
            )
            if shadow.invalid:
                why += f"; under its own bounds {shadow.invalid} were invalid, e.g. {shadow.first_invalid}"
            self._refuse(shadow.artifact, shadow.digest, why)
            shadow.serving.policy.close()

    def _serving_action(self, obs: np.ndarray) -> list[float] | None:
        """The serving policy's action on an observation its own guard refused (None if it cannot run)."""
        policy = self.policy
        try:
            a = policy.predict(obs, validated=True)
        except (BackendError, ObservationError):
            return None
        return [float(a)] if policy.discrete else np.asarray(a, np.float64).reshape(-1).tolist()

    def _compare(self, shadow: _Shadow, new: int | np.ndarray, served: list[float]) -> None:
        shadow.compared += 1
        policy = shadow.serving.policy
        if policy.categorical:  # integer actions agree where every component does
            shadow.agreed += int(np.array_equal(np.asarray(new, np.float64).reshape(-1), np.asarray(served)))
            return
        span = np.maximum(policy.action_high.astype(np.float64) - policy.action_low.astype(np.float64), 1e-12)
        diff = float(
            np.max(np.abs(np.asarray(new, np.float64).reshape(-1) - np.asarray(served)) / span.reshape(-1))
        )
        shadow.diff_sum += diff
        shadow.diff_max = max(shadow.diff_max, diff)

    def _judge(self, shadow: _Shadow) -> None:
        discrete = shadow.serving.policy.categorical
        result = self.last_shadow = shadow.result(discrete)
        share = shadow.invalid / shadow.checked if shadow.checked else 0.0
        if share > self.cfg.max_invalid:
            why = (
                f"under its own observation bounds {shadow.invalid} of {shadow.checked} live observations "
                f"({share:.1%}) would be invalid and get the safe action, over {self.cfg.max_invalid:.0%}; "
                f"e.g. {shadow.first_invalid}"
            )
        elif discrete and result["agreement"] < self.cfg.min_agreement:
            why = (
                f"its actions agreed with the serving policy's in {result['agreement']:.1%} of "
                f"{result['cycles']} shadow cycles, under --shadow-min-agreement {self.cfg.min_agreement:.0%}"
            )
        elif not discrete and result["mean_action_diff"] > self.cfg.max_action_diff:
            why = (
                f"its actions differed from the serving policy's by {result['mean_action_diff']:.1%} of the "
                f"action range on average over {result['cycles']} shadow cycles, over --shadow-max-diff "
                f"{self.cfg.max_action_diff:.0%}"
            )
        else:
            _logger.info("policy update: %s passed its shadow run %s", shadow.artifact, _shadow_text(result))
            self._ready = shadow
            return
        self._refuse(shadow.artifact, shadow.digest, why, shadow=result)
        shadow.serving.policy.close()

    def close(self) -> None:
        """Stop the model processes of candidates not yet serving (serve is stopping)."""
        for pending in (self._shadow, self._ready):
            if pending is not None:
                pending.serving.policy.close()
        self._shadow = self._ready = None

    # ---------------------------------------------------------------------------------- bookkeeping
    def _refuse(self, artifact: Path, digest: str | None, why: str, **extra: Any) -> None:
        self._record("refused", artifact, digest, why, **extra)
        _logger.error("policy update refused: %s: %s; %s keeps serving", artifact, why, self.serving_artifact)

    def _record(
        self, result: str, artifact: Path, digest: str | None, why: str, **extra: Any
    ) -> dict[str, Any]:
        self.counts[result] += 1
        record = {
            "result": result,
            "artifact": str(artifact),
            "manifest_sha256": digest,
            "at_cycle": self.cycles,
            "time": time.time(),
            **({"reason": why} if why else {}),
            **extra,
        }
        self.records.append(record)
        del self.records[:-MAX_RECORDS]
        self._last = MappingProxyType(dict(record))  # made once here, not per snapshot (each cycle)
        return record

    def state(self) -> UpdateState:
        """What the loop's snapshots show of the updates."""
        return UpdateState(
            artifact=self.serving_artifact,
            digest=self.serving_digest,
            counts=MappingProxyType(dict(self.counts)),
            last_shadow=MappingProxyType(dict(self.last_shadow)),
            last=self._last,
        )

    def summary(self) -> dict[str, Any]:
        """The summary's `policy` section."""
        return {
            "artifact": str(self.serving_artifact),
            "manifest_sha256": self.serving_digest,
            "updates": dict(self.counts),
            "update_cycles_latency_ms": {**_figures(self.latency), "deadline_misses": self.misses_during},
            "other_cycles_latency_ms": _figures(self.latency_other),
            "history": list(self.records),
        }


def _figures(h: LatencyHistogram) -> dict[str, Any]:
    s = h.summary()
    return {"cycles": h.count, "p50": s["p50"], "p99": s["p99"], "max": s["max"]}


def _shadow_text(result: dict[str, Any]) -> str:
    if "agreement" in result:
        return f"(agreement {result['agreement']:.1%} over {result['cycles']} cycles)"
    return (
        f"(action difference mean {result['mean_action_diff']:.2%}, max {result['max_action_diff']:.2%} of the "
        f"range over {result['cycles']} cycles)"
    )


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _manifest_digest(artifact: Path) -> str:
    """sha256 of the manifest, which holds the sha256 of every other file: the artifact's identity. A
    regular file of at most MAX_MANIFEST_BYTES, checked before it is read (ManifestError otherwise)."""
    return hashlib.sha256(
        read_regular_file(artifact / MANIFEST_FILE, MAX_MANIFEST_BYTES, "manifest", ManifestError)
    ).hexdigest()


def _identify(path: Path) -> tuple[Path, str]:
    """Where the watched path points now, and that artifact's manifest digest."""
    target = _real(path)
    return target, _manifest_digest(target)


async def _off_loop(timeout_s: float, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a daemon thread of its own, awaited for at most `timeout_s` (TimeoutError). Not the
    event loop's executor: a call wedged in the kernel (a FIFO, a hung network mount) would hold that
    executor's thread, and the exit waits for it; a daemon thread left behind holds nothing."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not done.done():
            (done.set_result if ok else done.set_exception)(value)

    def work() -> None:
        try:
            result: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # handed to the awaiting task, which raises it
            result = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, *result)

    threading.Thread(target=work, name="rl2edge-update-io", daemon=True).start()
    try:
        return await asyncio.wait_for(asyncio.shield(done), max(timeout_s, 0.0))
    except asyncio.TimeoutError:  # TimeoutError's alias from 3.11; distinct on 3.10
        raise TimeoutError from None


def _watch_key(path: Path) -> tuple[Any, ...]:
    """What changes when a deployer swaps a symlink or rewrites the artifact's files in place."""
    real = _real(path)
    try:
        with os.scandir(real) as entries:
            files = sorted(
                (e.name, e.inode(), e.stat().st_mtime_ns, e.stat().st_size) for e in entries if e.is_file()
            )
    except OSError:
        files = []
    return (str(real), tuple(files))
