"""The off-policy driver (SAC, TD3, DDPG, DQN, Rainbow), framework-neutral and top to bottom in execution
order, in CleanRL's shape: seeding, envs, random warm-up, the agent's action (plus the config's action
noise), the replay buffer (and an n-step collector) the config builds, the agent's per-step hook, training
phases, periodic deterministic evaluation, metrics, checkpoint. What differs by algorithm is its config's
(network fields, replay, n-step, noise: train.core.offpolicy_config) or its agent's (the hooks of
train.core.offpolicy_agent; DQN's and Rainbow's in train.core.dqn_hooks and rainbow_hooks); no algorithm is named here. A
backend supplies the networks and the gradient steps, as an `OffPolicyAgent`; the float work of sampling
and normalizing batches happens in train.core, once, for both.

Semantics follow SB3, so that Zoo hyperparameters mean the same: train_freq counts env steps per env,
gradient_steps -1 trains as many steps as transitions were collected, DQN's target_update_interval
counts env steps, training starts once more than learning_starts steps were taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ObservationSpec
from rl2edge.train.core.encoder_spec import encoder_spec
from rl2edge.train.core.evaluation import EvalResult
from rl2edge.train.core.her import her_buffer
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.offpolicy_config import OffPolicyConfig
from rl2edge.train.core.replay import ReplayBatch, ReplayBuffer
from rl2edge.train.core.run import TrainingRun, TrainResult
from rl2edge.train.core.threads import one_blas_thread

LOG_EVERY = 1_000  # env steps between metric rows


class OffPolicyAgent(Protocol):
    """What a backend provides. Observations are normalized float32 numpy arrays [B, obs_dim]."""

    framework: str
    device: str
    stat_names: tuple[str, ...]

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        """Greedy index (DQN) or the deterministic action in [-1, 1]-scaled units (SAC: tanh of the mean)."""

    def act(self, obs_norm: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
        """The action after warm-up, before the driver's noise: SAC samples its policy, TD3/DDPG act
        greedily, DQN epsilon-greedily (drawing from the run's `rng`)."""

    def after_env_step(self, iteration: int) -> None:
        """After each env step: DQN updates its target on its period (SAC and TD3 theirs inside training)."""

    def log_row(self, step: int) -> dict[str, float]:
        """The agent's own metric columns (DQN: epsilon)."""

    def set_learning_rate(self, lr: float) -> None: ...

    def train_phase(
        self,
        buffer: ReplayBuffer,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
        step: int,
    ) -> np.ndarray | None:
        """n gradient steps on batches sampled from `buffer` (with `rng`): the mean of stat_names over them
        (one host sync), or None when nothing was trained. Rainbow samples each after the last's priorities."""

    def train(self, batch: ReplayBatch) -> np.ndarray:
        """batch.n gradient steps, in order; the mean of stat_names over them (one host sync)."""

    def save_weights(self, run_dir: Path) -> str: ...

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


AgentFactory = Callable[[NetworkSpec, Any, int, str], OffPolicyAgent]


def network_spec(
    network_type: str, cfg: OffPolicyConfig, obs_spec: ObservationSpec, act_spec: ActionSpec
) -> NetworkSpec:
    """The checkpoint's description of the networks, from which export rebuilds the actor: the type is the
    algorithm's row's (train.algos), the fields beyond the sizes its config's."""
    return NetworkSpec(
        type=network_type,
        obs_dim=obs_spec.size,
        act_dim=act_spec.output_width,
        net_arch=tuple(int(w) for w in cfg.net_arch),
        activation=cfg.activation,
        **cfg.network_fields(),
        encoder=encoder_spec(obs_spec),  # image keys: a Nature-CNN each, in every network
    )


def train_offpolicy(
    env_id: str,
    cfg: OffPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
    network_type: str,
    device: str = "auto",
    progress: bool | None = None,
    on_evaluation: Callable[[int, EvalResult], bool] | None = None,
) -> TrainResult:
    """`network_type`: the checkpoint's network type (the algorithm's row, train.algos)."""
    # numpy's BLAS on one thread for the run, as the PPO rollout has it: after the numpy explorer's
    # 256-wide matmuls OpenBLAS's idle worker spins on sched_yield and holds the second core
    # (tests/test_offpolicy_mechanics.py checks the one thread).
    with one_blas_thread():
        return _train_offpolicy(
            env_id, cfg, seed, run_dir, make_agent, network_type, device, progress, on_evaluation
        )


def _train_offpolicy(
    env_id: str,
    cfg: OffPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
    network_type: str,
    device: str,
    progress: bool | None,
    on_evaluation: Callable[[int, EvalResult], bool] | None,
) -> TrainResult:
    # SEEDING: once, here. Env seeds at the first reset; the agent factory seeds its framework before any
    # initializer draws; this numpy generator drives warm-up actions, noise, epsilon and batch sampling.
    rng = np.random.default_rng(seed)
    run = TrainingRun(env_id, cfg, seed, run_dir, on_evaluation)
    envs, obs_spec, act_spec, norm, to_env = run.envs, run.obs_spec, run.act_spec, run.norm, run.to_env
    discrete, obs_shape = run.discrete, run.obs_shape
    if len(obs_spec.shape) != 1:
        run.close()
        raise ConfigError(
            f"{cfg.algo.upper()} takes flat observations; {env_id} has shape {list(obs_spec.shape)}"
        )
    n_envs, a_dim = cfg.n_envs, act_spec.output_width
    network = network_spec(network_type, cfg, obs_spec, act_spec)
    agent = make_agent(network, cfg, seed, device)
    capacity = min(cfg.buffer_size, cfg.n_timesteps + n_envs)
    # uniform, prioritized or hindsight, the config's; camera pixels stored as uint8 (the normalizer's raw
    # values)
    if cfg.replay_buffer_class is None:
        buffer = cfg.make_replay(capacity, obs_shape, discrete, a_dim, pixels=norm.raw)
    else:
        buffer = her_buffer(cfg, run, capacity, a_dim)
    nstep = cfg.make_nstep(n_envs)  # or None: one-step transitions
    noise = cfg.make_action_noise(a_dim, n_envs, rng)  # or None: the config's

    n_iters = max(1, math.ceil(cfg.n_timesteps / n_envs))
    raw_obs, _ = envs.reset(seed=seed)
    norm.update(raw_obs)
    ep_returns = np.zeros(n_envs)
    recent_returns = run.recent_returns
    stats: np.ndarray | None = None
    global_step, next_log = 0, LOG_EVERY
    lr_set: float | None = None  # the learning rate last given to the agent
    bar = run.begin(agent, n_iters * n_envs, progress, mininterval=0.5)
    try:
        for it in range(n_iters):
            # ACT: uniform random during warm-up, then the algorithm's exploration.
            if global_step < cfg.learning_starts:
                action = (
                    rng.integers(0, act_spec.n, size=n_envs)
                    if discrete
                    else rng.uniform(-1.0, 1.0, size=(n_envs, a_dim)).astype(np.float32)
                )
            else:  # the policy's sampling, greedy, epsilon-greedy or noisy layers: the agent's
                action = agent.act(norm.normalize(raw_obs), global_step, rng)
            if noise is not None:  # SB3 adds it during warm-up too
                action = np.clip(action + noise(), -1.0, 1.0).astype(np.float32)

            next_raw, reward, terminated, truncated, info = envs.step(to_env(action))
            done = terminated | truncated
            real_next = next_raw.copy()  # the reset observation is not the transition's successor
            for i in np.flatnonzero(done):
                real_next[i] = info["final_obs"][i]
            if nstep is None:
                buffer.add(raw_obs, action, reward.astype(np.float32), real_next, terminated)
            elif (ready := nstep.add(raw_obs, action, reward, real_next, terminated, truncated)) is not None:
                buffer.add(
                    ready.obs, ready.actions, ready.rewards, ready.next_obs, ready.terminated, ready.discounts
                )
            buffer.mark_episode_ends(done)  # HER samples finished episodes
            ep_returns += reward
            for i in np.flatnonzero(done):
                recent_returns.append(float(ep_returns[i]))
                ep_returns[i] = 0.0
                if noise is not None:
                    noise.reset(i)
            raw_obs = next_raw
            norm.update(raw_obs)
            global_step += n_envs
            bar.update(n_envs)

            agent.after_env_step(it)  # a target network's period, where the agent has one

            # TRAIN: every train_freq steps once warm-up is over; n batches sampled here, stepped by the backend.
            if (it + 1) % cfg.train_freq == 0 and global_step > cfg.learning_starts:
                lr = cfg.learning_rate(1.0 - global_step / cfg.n_timesteps)
                if lr != lr_set:  # TF assigns a variable per optimizer: only when the schedule moves
                    agent.set_learning_rate(lr)
                    lr_set = lr
                n = cfg.gradient_steps if cfg.gradient_steps > 0 else cfg.train_freq * n_envs
                phase = agent.train_phase(buffer, n, cfg.batch_size, rng, norm.normalize, global_step)
                if phase is not None:  # None: nothing to sample yet (n-step returns not complete)
                    stats = phase

            evaluating = run.evaluation_due(global_step)
            if global_step >= next_log or evaluating:
                next_log = (global_step // LOG_EVERY + 1) * LOG_EVERY
                row: dict[str, float] = {}
                if stats is not None:
                    row.update(zip(agent.stat_names, np.asarray(stats, np.float64).tolist(), strict=True))
                row.update(agent.log_row(global_step))  # the agent's own columns (epsilon)
                if recent_returns:
                    row["rollout_return_mean"] = float(np.mean(recent_returns[-20:]))
                    bar.set_postfix(ret=f"{row['rollout_return_mean']:.1f}", refresh=False)
                if evaluating:
                    run.evaluate_into(row, agent, global_step)
                run.log(global_step, row)
                if run.stop_requested:
                    break
    finally:
        run.close(bar)
    return run.finish(agent, global_step, network)
