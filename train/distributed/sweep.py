"""`rl2edge tune`: a hyperparameter sweep on Ray Tune, an Optuna search (TPE) and ASHA early stopping.

ASHA compares trials on the periodic evaluations every run already does (`eval_return` at `env_steps`);
a trial it stops still finishes as an ordinary run directory. The sweep's folder:

    <out>/trials/<trial id>/         one run directory per trial (…/s<seed>/ with several seeds)
    <out>/sweep.json, sweep.md       every trial: hyperparameters, status, steps, evaluations; the best run
    <out>/sweep.png                  evaluation return over env steps, one line per trial
    <out>/ray/                       Tune's experiment state (`--resume` continues from it)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError, Rl2EdgeError
from rl2edge.train.distributed.search_space import SearchSpace

_logger = logging.getLogger(__name__)

METRIC, TIME_ATTR = "eval_return", "env_steps"
EXPERIMENT = "ray"


@dataclass(frozen=True)
class SweepSpec:
    algo: str
    framework: str
    env_id: str
    space: SearchSpace
    config_file: str | None = None
    seeds: tuple[int, ...] = (0,)
    trials: int = 16
    max_concurrent: int | None = None
    grace_steps: int | None = None
    reduction_factor: int = 2
    search_seed: int = 0
    max_failures: int = 1


@dataclass
class TrialRow:
    trial_id: str
    hyperparameters: dict[str, Any]
    status: str  # "complete", "stopped early", "error"
    steps: int | None
    best_periodic_eval: float | None
    final_eval: float | None  # the checkpoint's evaluation (mean over seeds)
    run_dirs: list[str]
    error: str | None = None
    node_id: str | None = None  # the Ray node of its last report
    history: list[tuple[int, float]] = field(default_factory=list)


def total_steps(spec: SweepSpec) -> tuple[int, int]:
    """(n_timesteps, eval_freq) of the trials (fixed for the sweep; the space may not search them)."""
    from rl2edge.train.algos import build_config

    cfg = build_config(spec.env_id, spec.config_file, spec.space.fixed, algo=spec.algo)
    if not cfg.eval_freq:
        raise ConfigError("the sweep needs periodic evaluations (eval_freq > 0): ASHA stops trials on them")
    return cfg.n_timesteps, cfg.eval_freq


CPU_SHARE_STEP = 0.01
"""Ray's resources are fractions; a seed's share is rounded down to this step so that the bundles fit."""


def cpus_per_seed(cluster_cpus: float, seeds: int) -> float:
    """Each seed's CPU share in a trial's placement group: one CPU where the cluster has one per seed,
    else the cluster's CPUs split evenly (the seeds share the CPUs: slower, never waiting without end, as a
    request for more CPUs than the cluster has did). ConfigError if the cluster has no CPU to share."""
    if cluster_cpus < CPU_SHARE_STEP * seeds:
        raise ConfigError(
            f"the Ray cluster offers {cluster_cpus:g} CPUs; a trial of {seeds} seed(s) needs at least "
            f"{CPU_SHARE_STEP * seeds:g}: join a cluster with CPUs (--address) or start Ray here without it"
        )
    if cluster_cpus >= seeds:
        return 1.0
    return math.floor(cluster_cpus / seeds / CPU_SHARE_STEP) * CPU_SHARE_STEP


def run_sweep(
    spec: SweepSpec, out: Path, resume: bool = False, progress: bool | None = None
) -> dict[str, Any]:
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # no console tables from Tune: our bar and summary
    import optuna
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rl2edge.train.distributed.sweep_trial import RunSink, SweepTrial, TrialContext

    max_t, eval_freq = total_steps(spec)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    exp_dir = out / EXPERIMENT
    if resume and not tune.Tuner.can_restore(str(exp_dir)):
        raise ConfigError(f"--resume: no sweep to continue in {out} (no Tune experiment state in {exp_dir})")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    here = ray.get_runtime_context().get_node_id()
    sink = (
        ray.remote(RunSink)
        .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
        .remote(str(out / "trials"))
    )
    cluster_cpus = float(ray.cluster_resources().get("CPU", 0))
    share = cpus_per_seed(cluster_cpus, len(spec.seeds))
    if share < 1:
        _logger.warning(
            "the Ray cluster has %g CPUs and each trial trains %d seeds: each seed gets %.2f CPU (they share "
            "the CPUs, one trial at a time); a cluster with %d CPUs runs them a CPU each",
            cluster_cpus,
            len(spec.seeds),
            share,
            len(spec.seeds),
        )
    ctx = TrialContext(
        spec.algo, spec.framework, spec.env_id, spec.config_file, spec.space, spec.seeds, sink, share
    )
    trainable = tune.with_resources(
        tune.with_parameters(SweepTrial, ctx=ctx),
        tune.PlacementGroupFactory([{"CPU": share}] * len(spec.seeds)),
    )
    bar = _ProgressCallback(spec.trials, progress)
    start = time.perf_counter()
    if resume:
        tuner = tune.Tuner.restore(
            str(exp_dir), trainable=trainable, resume_unfinished=True, resume_errored=True
        )
    else:
        grace = spec.grace_steps or eval_freq
        scheduler = ASHAScheduler(
            time_attr=TIME_ATTR,
            metric=METRIC,
            mode="max",
            max_t=max_t,
            grace_period=grace,
            reduction_factor=spec.reduction_factor,
        )
        search = OptunaSearch(metric=METRIC, mode="max", seed=spec.search_seed)
        tuner = tune.Tuner(
            trainable,
            param_space=spec.space.to_tune(),
            tune_config=tune.TuneConfig(
                search_alg=search,
                scheduler=scheduler,
                num_samples=spec.trials,
                max_concurrent_trials=spec.max_concurrent,
            ),
            run_config=tune.RunConfig(
                name=EXPERIMENT,
                storage_path=str(out),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                # No Tune checkpoints: a retried trial starts over (its run directory is its only state).
                checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False, checkpoint_frequency=0),
                verbose=0,
                callbacks=[bar.callback],
            ),
        )
    try:
        grid = tuner.fit()
    finally:
        bar.close()
    wall = time.perf_counter() - start
    # TERMINATED: Tune ended the trial (its last step, or ASHA); a trial the sweep stopped around (SIGINT)
    # is left PAUSED, PENDING or RUNNING in the saved state, and --resume runs it
    finished = {
        t.trial_id for t in tune.ExperimentAnalysis(grid.experiment_path).trials if t.status == "TERMINATED"
    }
    rows = [_row(r, spec, out, max_t, finished) for r in grid]
    report = summarize(spec, rows, max_t, wall, resumed=resume)
    report["retried_trials"] = bar.recovered
    report["trials_table"] = [dataclasses.asdict(r) for r in rows]
    from rl2edge.train.distributed.sweep_report import write_report

    write_report(out, report, rows)
    interrupted = [r.trial_id for r in rows if r.status == "interrupted"]
    if interrupted:  # Tune stopped on SIGINT and saved its state: say how to go on, exit as interrupted
        _logger.error(
            "the sweep was interrupted with %d trial(s) unfinished (%s); continue it with the same command and "
            "--resume",
            len(interrupted),
            ", ".join(interrupted),
        )
        raise KeyboardInterrupt
    if not any(r.final_eval is not None for r in rows):
        raise Rl2EdgeError(f"no trial of the sweep finished a run; see {out / 'sweep.md'}")
    return report


def _row(result: Any, spec: SweepSpec, out: Path, max_t: int, finished: set[str]) -> TrialRow:
    import pandas as pd

    config = result.config or {}
    hp = {d.name: d.decode(config[d.name]) for d in spec.space.dimensions if d.name in config}
    metrics = result.metrics or {}
    trial_id = metrics.get("trial_id") or _trial_id_from_path(result.path)
    df = result.metrics_dataframe
    history: list[tuple[int, float]] = []
    if isinstance(df, pd.DataFrame) and METRIC in df and TIME_ATTR in df:
        history = [(int(s), float(v)) for s, v in zip(df[TIME_ATTR], df[METRIC], strict=True) if s == s]
    trial_root = out / "trials" / trial_id
    dirs = [trial_root] if len(spec.seeds) == 1 else [trial_root / f"s{s}" for s in spec.seeds]
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs if (d / "summary.json").is_file()]
    final = (
        float(sum(s["final_eval"]["mean_return"] for s in summaries) / len(summaries)) if summaries else None
    )
    steps = min(s["steps"] for s in summaries) if summaries else (history[-1][0] if history else None)
    if result.error is not None:
        status, error = (
            "error",
            f"{type(result.error).__name__}: {str(result.error).strip().splitlines()[-1]}",
        )
    else:
        if trial_id not in finished:
            status, error = "interrupted", None
        else:
            status = "complete" if steps is not None and steps >= max_t else "stopped early"
            error = None
    return TrialRow(
        trial_id,
        hp,
        status,
        steps,
        max((v for _, v in history), default=None),
        final,
        [str(d) for d in dirs if (d / "summary.json").is_file()],
        error,
        metrics.get("node_id"),
        history,
    )


def _trial_id_from_path(path: str | None) -> str:
    """Tune names a trial's folder <trainable>_<trial id>_<index>_<params>...; an errored trial that never
    reported has no metrics to read its id from."""
    parts = Path(path or "?").name.split("_")
    return parts[1] if len(parts) > 1 else parts[0]


def summarize(
    spec: SweepSpec, rows: list[TrialRow], max_t: int, wall: float, resumed: bool
) -> dict[str, Any]:
    ran = sum((r.steps or 0) for r in rows) * len(spec.seeds)
    full = len(rows) * max_t * len(spec.seeds)
    finished = [r for r in rows if r.final_eval is not None]
    best = max(finished, key=lambda r: (r.final_eval, r.steps or 0), default=None)
    rate = ran / wall if wall > 0 else math.nan
    return {
        "algo": spec.algo,
        "framework": spec.framework,
        "env_id": spec.env_id,
        "seeds": list(spec.seeds),
        "fixed": spec.space.fixed,
        "trials": len(rows),
        "status": {
            s: sum(r.status == s for r in rows) for s in ("complete", "stopped early", "error", "interrupted")
        },
        "max_steps_per_trial": max_t,
        "wall_time_s": wall,
        "resumed": resumed,
        "env_steps_run": ran,
        "env_steps_without_early_stopping": full,
        "asha_saved_fraction": 1.0 - ran / full if full else 0.0,
        "estimated_wall_time_without_early_stopping_s": full / rate if rate == rate and rate > 0 else None,
        "best": None
        if best is None
        else {
            "trial_id": best.trial_id,
            "final_eval": best.final_eval,
            "hyperparameters": best.hyperparameters,
            "run_dir": best.run_dirs[0] if best.run_dirs else None,
        },
    }


class _ProgressCallback:
    """A progress bar over trials (finished, stopped or failed), the best evaluation so far as postfix."""

    def __init__(self, total: int, progress: bool | None):
        from ray.tune import Callback
        from tqdm.auto import tqdm

        outer = self
        self.bar = tqdm(
            total=total, desc="sweep", unit="trial", disable=None if progress is None else not progress
        )
        self.best = -math.inf
        self.recovered: list[str] = []

        class _CB(Callback):
            def on_trial_result(
                self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
            ) -> None:
                if result.get(METRIC, -math.inf) > outer.best:
                    outer.best = result[METRIC]
                    outer.bar.set_postfix(best=f"{outer.best:.1f}")

            def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                outer.bar.update(1)

            def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                outer.bar.update(1)

            def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
                outer.recovered.append(trial.trial_id)
                _logger.warning("trial %s failed (a crash or a lost node) and starts over", trial.trial_id)

        self.callback = _CB()

    def close(self) -> None:
        self.bar.close()
