"""Recurrent PPO's driver, framework-neutral, in the order of train.core.onpolicy_driver (whose rollout
assembly and stats it shares): seeding, envs, a rollout that carries each env's LSTM state and records
log-probs, values and episode starts, GAE, sequence minibatches (whole envs), the update, evaluation
with the state carried and reset per episode, checkpoint. A backend supplies the network, the loss over
sequences and the optimizer step."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.train.core.config import OnPolicyConfig
from rl2edge.train.core.encoder_spec import encoder_spec
from rl2edge.train.core.evaluation import EvalResult
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RewardScaler, RunningNormalizer
from rl2edge.train.core.onpolicy_driver import STAT_NAMES, assemble
from rl2edge.train.core.recurrent_rollout import NumpyRecurrentActorCritic, RecurrentCollector, SequenceBuffer
from rl2edge.train.core.run import TrainingRun, TrainResult


def recurrent_network(cfg: Any, network_type: str, obs_dim: int, act_dim: int, discrete: bool) -> NetworkSpec:
    """The checkpoint's network: the on-policy fields and the config's own (the recurrent cell's)."""
    return NetworkSpec(
        type=network_type,
        obs_dim=obs_dim,
        act_dim=act_dim,
        discrete=discrete,
        net_arch=tuple(cfg.net_arch),
        activation=cfg.activation,
        log_std_init=cfg.log_std_init,
        **cfg.network_fields(),
    )


class StatefulEvaluator:
    """The deterministic policy for evaluate(): raw observation -> env action with the actor's LSTM state
    carried, `reset()` at each episode's start (evaluate calls it)."""

    def __init__(
        self,
        agent: Any,
        norm: RunningNormalizer,
        to_env: Callable[[Any], Any],
        flatten: Callable[[Any], np.ndarray],
        network: NetworkSpec,
    ):
        self.policy = NumpyRecurrentActorCritic(network)
        self.policy.load(agent.rollout_weights())
        self.norm, self.to_env, self.flatten = norm, to_env, flatten
        self._start = np.ones(1, bool)

    def reset(self) -> None:
        self.policy.reset(1)
        self._start = np.ones(1, bool)

    def __call__(self, raw_obs: Any) -> Any:
        if self.policy.actor_state is None:
            self.reset()
        x = self.norm.normalize(self.flatten(raw_obs)[None]).astype(np.float32)
        out = self.policy.deterministic(x, self._start)
        self._start = np.zeros(1, bool)
        return self.to_env(out[0])


def train_recurrent(
    env_id: str,
    cfg: OnPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: Callable[[NetworkSpec, OnPolicyConfig, int, str], Any],
    network_type: str,
    device: str = "auto",
    progress: bool | None = None,
    on_evaluation: Callable[[int, EvalResult], bool] | None = None,
    make_pool: Any = None,
) -> TrainResult:
    if make_pool is not None:  # train.algos.check_rollout_workers refuses first; a guard against edits
        raise ConfigError("--rollout-workers: recurrent policies collect their rollouts in one process")
    rng = np.random.default_rng(seed)  # SEEDING: once, here, as the on-policy driver
    run = TrainingRun(env_id, cfg, seed, run_dir, on_evaluation)
    envs, obs_spec, act_spec, norm = run.envs, run.obs_spec, run.act_spec, run.norm
    if encoder_spec(obs_spec) is not None:  # train.algos.check_env refuses first
        raise ConfigError(f"{cfg.algo} takes vector observations; {env_id} has image keys")
    network = recurrent_network(cfg, network_type, obs_spec.size, act_spec.output_width, run.discrete)
    agent = make_agent(network, cfg, seed, device)
    run.act_fn = lambda agent_, norm_: StatefulEvaluator(agent_, norm_, run.to_env, obs_spec.flatten, network)
    buffer = SequenceBuffer(cfg.n_steps, cfg.n_envs, run.obs_shape, run.discrete, act_spec.output_width)
    batch_steps = cfg.n_envs * cfg.n_steps
    minibatch = cfg.batch_size or batch_steps  # A2C: the whole rollout, one gradient step
    stat_names = getattr(agent, "stat_names", STAT_NAMES)
    n_updates = max(1, math.ceil(cfg.n_timesteps / batch_steps))
    scale = RewardScaler(cfg.n_envs, cfg.gamma) if cfg.normalize_reward else None
    live_norm = cfg.norm_obs_update == "step"
    collector = RecurrentCollector(
        env_id, 0, cfg.n_envs, seed, cfg.gamma, network, norm, live_norm, run.to_env, cfg.n_envs, envs=envs
    )
    norm.update(collector.raw_obs)
    global_step = 0
    bar = run.begin(agent, n_updates * batch_steps, progress)
    try:
        for update in range(n_updates):
            progress_remaining = 1.0 - update / n_updates
            clip = cfg.clip_range(progress_remaining) if cfg.clip_range is not None else 0.0  # A2C: none
            lr = cfg.learning_rate(progress_remaining)
            agent.set_learning_rate(lr)

            # ROLLOUT: the state carried per env; log-probs, values and episode starts recorded while acting.
            seg = collector.collect(cfg.n_steps, agent.rollout_weights())
            assemble(seg, buffer, scale, None if live_norm else norm)
            buffer.set_sequences(seg.starts, seg.init_state)
            run.recent_returns.extend(ret for _, _, ret in seg.episodes)
            global_step += batch_steps
            buffer.finish(seg.last_values, cfg.gamma, cfg.gae_lambda)

            # UPDATE: n_epochs over minibatches of whole env sequences (A2C: one, the whole rollout).
            done_epochs = []
            for _ in range(cfg.n_epochs):
                mbs = list(buffer.sequence_minibatches(minibatch, rng, cfg.normalize_advantage))
                done_epochs.append(agent.train_minibatches(mbs, clip))
                if cfg.target_kl is not None and done_epochs[-1][3] > 1.5 * cfg.target_kl:
                    break
            stats = dict(
                zip(stat_names, np.mean(done_epochs, axis=0).astype(np.float64).tolist(), strict=True)
            )
            bar.update(batch_steps)

            row = {"lr": lr, **({"clip_range": clip} if cfg.clip_range is not None else {}), **stats}
            if run.recent_returns:
                row["rollout_return_mean"] = float(np.mean(run.recent_returns[-20:]))
                bar.set_postfix(ret=f"{row['rollout_return_mean']:.1f}")
            if run.evaluation_due(global_step):
                run.evaluate_into(row, agent, global_step)
            run.metrics.log(global_step, row)
            if run.stop_requested:
                break
    finally:
        run.close(bar)
        collector.close()
    return run.finish(agent, global_step, network)
