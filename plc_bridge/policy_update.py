"""A policy update without stopping the line: `rl2edge serve --watch` and SIGHUP.

A request (the watched artifact path changed, or SIGHUP) starts an update:
1. load: the artifact the path points to now is loaded and checked in a worker thread, off the control
   path (manifest and file hashes, the model's structure, one run in a child process);
2. fit: its observation and action specs must be the serving policy's (the node map and the PLC's nodes
   were checked against those);
3. shadow: for `shadow_cycles` OK cycles it runs on the live observation after the serving policy's
   action has been written, and its actions are compared (discrete: the share of equal actions; Box: the
   difference as a share of each action's range); nothing it computes is written;
4. takeover: if the shadow run passes, it serves from the start of the next cycle (a swap of references;
   its interpreter is loaded and warm).
Any failure leaves the serving policy serving and is logged, counted and recorded in the summary. A
rollback is the same operation with the previous artifact (point the path back at it). A newer request
replaces an update still in its shadow run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.errors import BackendError, ConfigError, ObservationError, Rl2EdgeError
from rl2edge.plc_bridge.latency import LatencyHistogram
from rl2edge.plc_bridge.status import CycleStatus
from rl2edge.runtime.manifest import MANIFEST_FILE
from rl2edge.runtime.policy import Policy

if TYPE_CHECKING:
    from rl2edge.plc_bridge.loop import ControlLoop, Serving

_logger = logging.getLogger(__name__)

MAX_RECORDS = 100
"""Updates kept in the summary: the newest, so that a service running for months keeps a bounded file."""


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

    def check(self) -> None:
        if self.shadow_cycles < 0:
            raise ConfigError(f"--shadow-cycles {self.shadow_cycles}: choose 0 (no shadow run) or more")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ConfigError(f"--shadow-min-agreement {self.min_agreement:g}: choose a share from 0 to 1")
        if not 0.0 <= self.max_action_diff <= 1.0:
            raise ConfigError(
                f"--shadow-max-diff {self.max_action_diff:g}: choose a share of the range, 0 to 1"
            )
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

    def result(self, discrete: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"cycles": self.compared}
        if self.compared:
            if discrete:
                out["agreement"] = self.agreed / self.compared
            else:
                out["mean_action_diff"] = self.diff_sum / self.compared
                out["max_action_diff"] = self.diff_max
        return out


class PolicyUpdates:
    """Runs the updates of one control loop (installed as its `updater`)."""

    def __init__(self, control: ControlLoop, cfg: UpdateConfig):
        cfg.check()
        self.control, self.cfg = control, cfg
        self.serving_artifact = _real(cfg.artifact)
        self.serving_digest = _manifest_digest(self.serving_artifact)
        self.records: list[dict[str, Any]] = []
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
        """Poll the artifact path: where it points, and the manifest's and model's inode and mtime."""
        self._watched = await asyncio.to_thread(_watch_key, self.cfg.artifact)
        while not stop.is_set():
            await asyncio.sleep(self.cfg.poll_s)
            key = await asyncio.to_thread(_watch_key, self.cfg.artifact)
            if key != self._watched:
                self._watched = key
                self.request(f"{self.cfg.artifact} changed")

    # ------------------------------------------------------------------------------------ load, fit
    async def _consider(self, reason: str) -> None:
        if self._shadow is not None:
            self._record(
                "superseded", self._shadow.artifact, self._shadow.digest, "a newer update was requested"
            )
            self._shadow = None
        self._loading = True
        try:
            target = await asyncio.to_thread(_real, self.cfg.artifact)
            t0 = time.perf_counter()
            _logger.info("policy update (%s): loading %s", reason, target)
            try:
                digest = await asyncio.to_thread(_manifest_digest, target)
                if digest == self.serving_digest and target == self.serving_artifact:
                    self.counts["unchanged"] += 1
                    _logger.info("policy update: %s is the serving artifact; nothing to do", target)
                    return
                policy = await asyncio.to_thread(self.cfg.load, target)
                serving = self.control.prepare(policy)
            except Rl2EdgeError as exc:
                self._refuse(target, None, str(exc))
                return
            except OSError as exc:
                self._refuse(target, None, f"cannot read it ({exc.strerror or exc})")
                return
            shadow = _Shadow(serving, target, digest, time.perf_counter() - t0)
            if self.cfg.shadow_cycles == 0:
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
    def before_cycle(self) -> None:
        """At the start of a cycle: a candidate that passed takes over now."""
        ready, self._ready = self._ready, None
        if ready is None:
            return
        old = self.serving_artifact
        self.control.install(ready.serving)
        self.serving_artifact, self.serving_digest = ready.artifact, ready.digest
        record = self._record(
            "accepted", ready.artifact, ready.digest, "", first_cycle=self.control.counters.cycles + 1
        )
        record.update(
            replaced=str(old),
            load_s=round(ready.load_s, 3),
            shadow=ready.result(self.control.policy.discrete),
        )
        self._first_cycle_of = record
        _logger.info("policy update: %s serves from cycle %d on", ready.artifact, record["first_cycle"])

    def after_cycle(
        self, status: CycleStatus, obs: np.ndarray | None, action: list[float], seq: Any, latency_ms: float
    ) -> None:
        """After a cycle's write: account for the swap's cycles, and run the shadow."""
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
        if status == CycleStatus.OK and obs is not None:
            policy = shadow.serving.policy
            try:
                new = policy.predict(obs.reshape(policy.obs_shape))
            except (BackendError, ObservationError) as exc:
                self._shadow = None
                self._refuse(shadow.artifact, shadow.digest, f"it failed on a live observation: {exc}")
                return
            self._compare(shadow, new, action)
        if shadow.compared >= self.cfg.shadow_cycles:
            self._shadow = None
            self._judge(shadow)
        elif shadow.cycles >= self.cfg.patience * self.cfg.shadow_cycles:
            self._shadow = None
            self._refuse(
                shadow.artifact,
                shadow.digest,
                f"only {shadow.compared} of {shadow.cycles} cycles had a valid observation to shadow-run it on "
                f"({self.cfg.shadow_cycles} needed)",
            )

    def _compare(self, shadow: _Shadow, new: int | np.ndarray, served: list[float]) -> None:
        shadow.compared += 1
        policy = shadow.serving.policy
        if policy.discrete:
            shadow.agreed += int(int(new) == int(served[0]))
            return
        span = np.maximum(policy.action_high.astype(np.float64) - policy.action_low.astype(np.float64), 1e-12)
        diff = float(
            np.max(np.abs(np.asarray(new, np.float64).reshape(-1) - np.asarray(served)) / span.reshape(-1))
        )
        shadow.diff_sum += diff
        shadow.diff_max = max(shadow.diff_max, diff)

    def _judge(self, shadow: _Shadow) -> None:
        discrete = shadow.serving.policy.discrete
        result = self.last_shadow = shadow.result(discrete)
        if discrete and result["agreement"] < self.cfg.min_agreement:
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
            "at_cycle": self.control.counters.cycles,
            "time": time.time(),
            **({"reason": why} if why else {}),
            **extra,
        }
        self.records.append(record)
        del self.records[:-MAX_RECORDS]
        return record

    def summary(self) -> dict[str, Any]:
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
    """sha256 of the manifest, which holds the sha256 of every other file: the artifact's identity."""
    try:
        data = (artifact / MANIFEST_FILE).read_bytes()
    except FileNotFoundError:
        return ""  # load_manifest says what is wrong
    return hashlib.sha256(data).hexdigest()


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
