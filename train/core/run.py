"""What every training run shares, whatever the algorithm (train.core.onpolicy_driver and
train.core.offpolicy_driver differ only in how they collect data and update): the envs and their specs,
the observation normalizer, the metrics, the periodic evaluation that remembers the best policy, and the
end: keep the best policy (when asked), write the weights, then checkpoint.json, then summary.json."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from rl2edge.fileio import write_json_atomic
from rl2edge.specs import ActionSpec, ActionTransform, ObservationSpec
from rl2edge.train.core.checkpoint import Checkpoint, library_versions, write_checkpoint
from rl2edge.train.core.config import RunConfig
from rl2edge.train.core.encoder_spec import image_mask
from rl2edge.train.core.envs import make_vec_env, vec_observation_spec
from rl2edge.train.core.evaluation import EvalResult, evaluate
from rl2edge.train.core.finite_check import check_losses, check_weights
from rl2edge.train.core.frame_stack import FrameStacker, check_stackable, stacked_spec
from rl2edge.train.core.metrics import MetricsLogger
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.spaces import action_spec, network_view

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


CONFIRM_EPISODES = 20
"""A policy a periodic evaluation nominates is kept only after this many episodes confirm it."""
CONFIRM_SEED_OFFSET = 20_000
"""The confirmation's seeds: apart from the training envs' and the periodic evaluations' (EVAL_SEED_OFFSET)."""


@dataclass(frozen=True)
class Kept:
    """A policy of the run and what it was kept for."""

    step: int
    nominated: float
    """The periodic evaluation's mean (eval_episodes episodes) that nominated it."""
    confirmed: EvalResult
    """CONFIRM_EPISODES episodes on the confirmation seeds: what it is compared and reported by."""
    state: Any
    norm: RunningNormalizer


class BestKeeper:
    """The best policy of the run, chosen honestly. A periodic evaluation (a few episodes) only nominates: the
    maximum of many noisy few-episode scores overstates the policy it picks (a recurrent run's evaluations
    swung between 166 and 500). A nominee is evaluated again over CONFIRM_EPISODES episodes on seeds of its
    own, and replaces the kept policy only if that confirmed mean is higher."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.best: Kept | None = None

    def offer(
        self,
        result: EvalResult,
        step: int,
        agent: Any,
        norm: RunningNormalizer,
        confirm: Callable[[], EvalResult],
    ) -> None:
        if not self.enabled or (self.best is not None and result.mean <= self.best.confirmed.mean):
            return
        confirmed = confirm()
        _logger.info(
            "step %d: eval %.1f nominates this policy; %d episodes on other seeds confirm %.1f +- %.1f%s",
            step,
            result.mean,
            len(confirmed.returns),
            confirmed.mean,
            confirmed.std,
            ""
            if self.best is None
            else f" (kept so far: step {self.best.step}, {self.best.confirmed.mean:.1f})",
        )
        if self.best is None or confirmed.mean > self.best.confirmed.mean:
            self.best = Kept(step, result.mean, confirmed, agent.get_state(), copy.deepcopy(norm))


def confirmation(
    act_fn: Callable[[Any, RunningNormalizer], Callable[[Any], Any]],
    agent: Any,
    norm: RunningNormalizer,
    env_id: str,
    seed: int,
) -> EvalResult:
    """The policy's CONFIRM_EPISODES episodes on the confirmation seeds."""
    return evaluate(act_fn(agent, norm), env_id, CONFIRM_EPISODES, seed + CONFIRM_SEED_OFFSET)


def finish_run(
    *,
    cfg: RunConfig,
    agent: Any,
    norm: RunningNormalizer,
    keeper: BestKeeper,
    act_fn: Callable[[Any, RunningNormalizer], Callable[[Any], Any]],
    env_id: str,
    seed: int,
    run_dir: Path,
    global_step: int,
    wall: float,
    spaces: tuple[ObservationSpec, ActionSpec],
    network: NetworkSpec,
    world_size: int = 1,
) -> TrainResult:
    """Evaluate, keep the best policy, write checkpoint.json (+ weights) and summary.json. `act_fn(agent,
    norm)` gives the deterministic raw-observation -> env-action callable; `spaces` the observation and
    action specs; `network` what export rebuilds the policy from; `world_size` the processes of a
    data-parallel job (train.data_parallel) that trained it."""
    algo, eval_episodes = cfg.algo, cfg.eval_episodes
    eval_seed = seed + EVAL_SEED_OFFSET
    final_eval = last_eval = evaluate(act_fn(agent, norm), env_id, eval_episodes, eval_seed)
    kept: dict[str, Any] = {"kept": "last", "step": global_step}
    best = keeper.best
    if best is not None:  # the last policy is confirmed the same way before the two are compared
        last = confirmation(act_fn, agent, norm, env_id, seed)
        kept["confirm_episodes"] = CONFIRM_EPISODES
        kept["last_confirmed_return"] = last.mean
        kept["best_confirmed_return"] = best.confirmed.mean
        if best.confirmed.mean > last.mean:
            agent.set_state(best.state)
            norm = best.norm
            final_eval = evaluate(act_fn(agent, norm), env_id, eval_episodes, eval_seed)
            kept.update(kept="best", step=best.step, nominated_by=best.nominated)
            _logger.info(
                "checkpoint: the policy of step %d (confirmed %.1f over %d episodes), not the last one "
                "(confirmed %.1f)",
                best.step,
                best.confirmed.mean,
                CONFIRM_EPISODES,
                last.mean,
            )
    check_weights(agent.get_state())
    write_checkpoint(
        Checkpoint(
            path=run_dir,
            algo=algo,
            framework=agent.framework,
            env_id=env_id,
            observation=spaces[0],
            action=spaces[1],
            network=network,
            normalization=norm.to_dict(),
            weights_file=agent.save_weights(run_dir),
            seed=seed,
            total_timesteps=global_step,
            hyperparameters=cfg.to_json(),
            world_size=world_size,
            versions=library_versions("torch" if agent.framework == "torch" else "tensorflow"),
        )
    )
    write_json_atomic(
        run_dir / "summary.json",
        {
            "algo": algo,
            "steps": global_step,
            "wall_time_s": wall,
            "steps_per_s": global_step / wall,  # the whole job's env steps
            "world_size": world_size,
            "device": agent.device,
            "framework": agent.framework,
            # what the training phases' matmuls computed in (train --matmul-precision): another run
            **({"matmul_precision": agent.matmul_precision} if agent.framework == "torch" else {}),
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


def _ravel(obs: Any) -> np.ndarray:
    return np.asarray(obs).reshape(-1)


def deterministic_fn(
    to_env: Callable[[Any], Any], flatten: Callable[[Any], np.ndarray] = np.asarray, frame_stack: int = 1
) -> Callable[[Any, RunningNormalizer], Callable[[Any], Any]]:
    """(agent, norm) -> the deterministic raw-observation -> env-action callable that evaluation runs.
    `flatten`: a Dict observation (as the env gives it) -> the one vector the network sees; with
    `frame_stack` K > 1 the callable stacks the last K (and evaluate resets it per episode)."""

    def make(agent: Any, norm: RunningNormalizer) -> Callable[[Any], Any]:
        if frame_stack == 1:
            return lambda raw_obs: to_env(agent.deterministic(norm.normalize(flatten(raw_obs)[None]))[0])
        return StackedAct(agent, norm, to_env, flatten, frame_stack)

    return make


class StackedAct:
    """The deterministic policy on the last K observations (train.core.frame_stack), reset per episode."""

    def __init__(self, agent: Any, norm: RunningNormalizer, to_env: Any, flatten: Any, k: int):
        self.agent, self.norm, self.to_env, self.flatten = agent, norm, to_env, flatten
        self.stacker: FrameStacker | None = None
        self.k = k

    def reset(self) -> None:
        if self.stacker is not None:
            self.stacker.reset()

    def __call__(self, raw_obs: Any) -> Any:
        x = np.asarray(self.flatten(raw_obs), np.float32).reshape(-1)
        if self.stacker is None:
            self.stacker = FrameStacker(self.k, x.size)
        stacked = self.stacker(x)
        return self.to_env(self.agent.deterministic(self.norm.normalize(stacked[None]))[0])


class TrainingRun:
    """One run's shared parts. Made before the agent (the network spec needs the spaces); `begin` opens the
    metrics and the progress bar once the agent exists; `finish` ends it."""

    def __init__(
        self,
        env_id: str,
        cfg: RunConfig,
        seed: int,
        run_dir: Path,
        on_evaluation: Callable[[int, EvalResult], bool] | None = None,
        n_envs: int | None = None,
    ):
        """`n_envs`: the envs this process steps, when not the config's all (a data-parallel process's share)."""
        self.env_id, self.cfg, self.seed, self.run_dir = env_id, cfg, seed, run_dir
        self.on_evaluation = on_evaluation
        self.stop_requested = False
        k = int(cfg.frame_stack)
        self.envs = make_vec_env(env_id, cfg.n_envs if n_envs is None else n_envs, k)
        # the observation the env (and the PLC) gives, one frame; the network sees `frame_stack` of them
        self.frame_spec = vec_observation_spec(self.envs)
        check_stackable(self.frame_spec, k)  # flat Box observations only (a matrix is refused)
        view = network_view(self.frame_spec)  # a (5, 5) matrix: its 25 values, row-major
        self.obs_spec = stacked_spec(view, k)
        self.act_spec = action_spec(self.envs.single_action_space)
        self.discrete = self.act_spec.categorical  # integer actions, categorical heads
        self.obs_shape = self.obs_spec.shape
        self.to_env = ActionTransform(self.act_spec).to_env
        self.norm = RunningNormalizer(self.obs_shape, clip=cfg.norm_obs_clip, enabled=cfg.normalize_obs)
        self.norm.raw = image_mask(self.obs_spec)  # pixels: scaled in the network, never normalized
        # an observation as the env gives it -> the one vector the network sees (before any stacking)
        self.flatten = self.frame_spec.flatten if view is self.frame_spec else _ravel
        self.act_fn = deterministic_fn(self.to_env, self.flatten, k)
        self.keeper = BestKeeper(cfg.keep_best)
        self.recent_returns: list[float] = []
        self.next_eval = cfg.eval_freq
        self.metrics: MetricsLogger | None = None
        self._start = 0.0

    def begin(self, agent: Any, total_steps: int, progress: bool | None, **bar: Any) -> tqdm:
        self.metrics = MetricsLogger(self.run_dir)
        self._start = time.perf_counter()
        return tqdm(
            total=total_steps,
            desc=f"{self.cfg.algo}/{agent.framework} {self.env_id}",
            unit="step",
            disable=None if progress is None else not progress,
            leave=False,
            **bar,
        )

    def evaluation_due(self, global_step: int) -> bool:
        return bool(self.cfg.eval_freq) and global_step >= self.next_eval

    def evaluate_into(self, row: dict[str, float], agent: Any, global_step: int) -> None:
        """The periodic evaluation, on seeds the training envs never use; the best one is remembered."""
        self.next_eval += self.cfg.eval_freq
        result = evaluate(
            self.act_fn(agent, self.norm), self.env_id, self.cfg.eval_episodes, self.seed + EVAL_SEED_OFFSET
        )
        row["eval_return_mean"], row["eval_return_std"] = result.mean, result.std
        _logger.info("step %d: eval return %.1f +- %.1f", global_step, result.mean, result.std)
        self.keeper.offer(
            result,
            global_step,
            agent,
            self.norm,
            lambda: confirmation(self.act_fn, agent, self.norm, self.env_id, self.seed),
        )
        # A sweep's scheduler (train.distributed) may stop the run here; the driver then finishes it as usual.
        if self.on_evaluation is not None and not self.on_evaluation(global_step, result):
            _logger.info("step %d: stopped early by the sweep's scheduler", global_step)
            self.stop_requested = True

    def log(self, step: int, row: dict[str, float]) -> None:
        """One row of progress.csv and TensorBoard (the metrics exist once `begin` ran)."""
        assert self.metrics is not None, "begin() the run first"
        self.metrics.log(step, row)
        check_losses(step, row)  # logged first: progress.csv shows the row that stopped the run

    def close(self, bar: tqdm | None = None) -> None:
        if bar is not None:
            bar.close()
        if self.metrics is not None:
            self.metrics.close()
        self.envs.close()

    def unwritten(self, global_step: int) -> TrainResult:
        """A data-parallel job's other processes: the run as far as they know it (the lead writes it)."""
        return TrainResult(self.run_dir, global_step, time.perf_counter() - self._start, EvalResult([], []))

    def finish(self, agent: Any, global_step: int, network: NetworkSpec, world_size: int = 1) -> TrainResult:
        return finish_run(
            cfg=self.cfg,
            agent=agent,
            norm=self.norm,
            keeper=self.keeper,
            act_fn=self.act_fn,
            env_id=self.env_id,
            seed=self.seed,
            run_dir=self.run_dir,
            global_step=global_step,
            wall=time.perf_counter() - self._start,
            spaces=(self.frame_spec, self.act_spec),
            network=network.replace(frame_stack=int(self.cfg.frame_stack)),
            world_size=world_size,
        )
