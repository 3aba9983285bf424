"""The end of every training run, whatever the algorithm: keep the best periodic evaluation's policy
(when asked), write the weights, then checkpoint.json, then summary.json."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl2edge.fileio import write_json_atomic
from train.core.checkpoint import library_versions, write_checkpoint
from train.core.evaluation import EvalResult, evaluate
from train.core.normalization import RunningNormalizer

_logger = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 10_000  # periodic evaluation never reuses the training envs' seeds


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    steps: int
    wall_time_s: float
    final_eval: EvalResult

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_time_s


class BestKeeper:
    """Remembers the weights and normalizer of the best periodic evaluation."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.best: tuple[float, int, Any, RunningNormalizer] | None = None

    def offer(self, result: EvalResult, step: int, agent: Any, norm: RunningNormalizer) -> None:
        if self.enabled and (self.best is None or result.mean > self.best[0]):
            self.best = (result.mean, step, agent.get_state(), copy.deepcopy(norm))


def finish_run(
    *,
    algo: str,
    agent: Any,
    norm: RunningNormalizer,
    keeper: BestKeeper,
    act_fn: Callable[[Any, RunningNormalizer], Callable[[Any], Any]],
    env_id: str,
    seed: int,
    eval_episodes: int,
    run_dir: Path,
    global_step: int,
    wall: float,
    meta: dict[str, Any],
) -> TrainResult:
    """`act_fn(agent, norm)` gives the deterministic raw-observation -> env-action callable."""
    eval_seed = seed + EVAL_SEED_OFFSET
    final_eval = last_eval = evaluate(act_fn(agent, norm), env_id, eval_episodes, eval_seed)
    kept = {"kept": "last", "step": global_step}
    best = keeper.best
    if best is not None and best[0] > last_eval.mean:
        agent.set_state(best[2])
        norm = best[3]
        final_eval = evaluate(act_fn(agent, norm), env_id, eval_episodes, eval_seed)
        kept = {"kept": "best", "step": best[1]}
        _logger.info(
            "checkpoint: the policy of step %d (eval %.1f), not the last one (eval %.1f)",
            best[1],
            final_eval.mean,
            last_eval.mean,
        )
    weights_file = agent.save_weights(run_dir)
    write_checkpoint(
        run_dir,
        {
            "algo": algo,
            "framework": agent.framework,
            "env_id": env_id,
            "seed": seed,
            "total_timesteps": global_step,
            **meta,
            "normalization": norm.to_dict(),
            "versions": library_versions("torch" if agent.framework == "torch" else "tensorflow"),
        },
        weights_file,
    )
    write_json_atomic(
        run_dir / "summary.json",
        {
            "algo": algo,
            "steps": global_step,
            "wall_time_s": wall,
            "steps_per_s": global_step / wall,
            "device": agent.device,
            "framework": agent.framework,
            "checkpoint": kept,
            "last_eval": {"mean_return": last_eval.mean, "std_return": last_eval.std},
            "final_eval": {
                "seed": eval_seed,
                "mean_return": final_eval.mean,
                "std_return": final_eval.std,
                "returns": final_eval.returns,
            },
        },
    )
    return TrainResult(run_dir, global_step, wall, final_eval)


def deterministic_fn(
    to_env: Callable[[Any], Any],
) -> Callable[[Any, RunningNormalizer], Callable[[Any], Any]]:
    """(agent, norm) -> the deterministic raw-observation -> env-action callable that evaluation runs."""

    def make(agent: Any, norm: RunningNormalizer) -> Callable[[Any], Any]:
        return lambda raw_obs: to_env(agent.deterministic(norm.normalize(raw_obs[None]))[0])

    return make
