"""One trial of `rl2edge tune`, as a Ray Tune class Trainable (this module imports Ray: only sweeps load it).

A trial trains one configuration on each of its seeds: the first in the trial's own actor, the others in
child actors inside the trial's placement group (one CPU each). Each `step` lets every seed run to its next
periodic evaluation and reports their mean as `eval_return` at `env_steps`, which ASHA compares across
trials. When Tune stops the trial (ASHA, or the end), `cleanup` lets each run finish as an ordinary run
(best checkpoint, summary.json) and sends its directory to the sweep's RunSink on the driver's node.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import tune

from rl2edge.train.distributed.search_space import SearchSpace
from rl2edge.train.distributed.stepped_run import Event, SteppedRun, pack_directory, store_directory

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialContext:
    """What every trial shares: the run's identity, the search space, where run directories go."""

    algo: str
    framework: str
    env_id: str
    config_file: str | None
    space: SearchSpace
    seeds: tuple[int, ...]
    sink: Any  # RunSink actor handle
    cpus_per_seed: float = 1.0
    """Each seed's share of a CPU (train.distributed.sweep.cpus_per_seed): below 1 where the cluster has
    fewer CPUs than a trial has seeds."""


class RunSink:
    """On the driver's node: writes the run directories that trials send (no shared file system needed)."""

    def __init__(self, root: str):
        self.root = Path(root)

    def put(self, rel: str, archive: bytes) -> str:
        store_directory(archive, self.root / rel)
        return str(self.root / rel)


class SeedRun:
    """A SteppedRun in an actor of its own (a trial's second and later seeds)."""

    def __init__(self, framework: str, env_id: str, cfg: Any, seed: int):
        logging.basicConfig(level=logging.WARNING)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"rl2edge-trial-s{seed}-"))
        self.run = SteppedRun(framework, env_id, cfg, seed, self.tmp / "run")

    def next(self) -> Event:
        return self.run.next()

    def finish(self) -> tuple[Event, bytes | None]:
        event = self.run.finish()
        archive = pack_directory(self.tmp / "run") if event.kind == "done" else None
        shutil.rmtree(self.tmp, ignore_errors=True)
        return event, archive


class SweepTrial(tune.Trainable):
    def setup(self, config: dict[str, Any], ctx: TrialContext) -> None:
        from rl2edge.train.algos import build_config

        self.ctx = ctx
        self.hp = ctx.space.decode(config)
        cfg = build_config(ctx.env_id, ctx.config_file, self.hp, algo=ctx.algo)
        self.tmp = Path(tempfile.mkdtemp(prefix="rl2edge-trial-"))
        first, *others = ctx.seeds
        self.local = SteppedRun(ctx.framework, ctx.env_id, cfg, first, self.tmp / "run")
        remote = ray.remote(num_cpus=ctx.cpus_per_seed)(SeedRun)
        self.remote = [remote.remote(ctx.framework, ctx.env_id, cfg, s) for s in others]
        self.finished = False

    def step(self) -> dict[str, Any]:
        events = [self.local.next(), *ray.get([r.next.remote() for r in self.remote])]
        errors = [e.error for e in events if e.kind == "error"]
        if errors:
            raise errors[0]
        returns = [e.eval_return for e in events]
        done = any(e.kind == "done" for e in events)  # the same schedule: all end together
        return {
            "eval_return": float(np.mean(returns)),
            "seed_returns": returns,
            "env_steps": max(e.step for e in events),
            "node_id": ray.get_runtime_context().get_node_id(),
            "done": done,
        }

    def cleanup(self) -> None:
        if self.finished:
            return
        self.finished = True
        trial = self.trial_id
        single = len(self.ctx.seeds) == 1
        event = self.local.finish()
        if event.kind == "done":
            rel = trial if single else f"{trial}/s{self.ctx.seeds[0]}"
            ray.get(self.ctx.sink.put.remote(rel, pack_directory(self.tmp / "run")))
        shutil.rmtree(self.tmp, ignore_errors=True)
        for seed, (ev, archive) in zip(
            self.ctx.seeds[1:], ray.get([r.finish.remote() for r in self.remote]), strict=True
        ):
            if archive is not None:
                ray.get(self.ctx.sink.put.remote(f"{trial}/s{seed}", archive))
            elif ev.error is not None:
                _logger.error("trial %s seed %d: %s", trial, seed, ev.error)
