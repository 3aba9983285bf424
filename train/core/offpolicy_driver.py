"""The off-policy driver (SAC, TD3, DDPG, DQN, Rainbow), framework-neutral and top to bottom in execution
order: seeding, envs, random warm-up, exploration (the policy's own sampling, action noise, epsilon-greedy,
or noisy layers), the replay buffer (uniform, or prioritized with n-step transitions for Rainbow),
training phases of stacked batches, DQN's target period, periodic deterministic evaluation, metrics,
checkpoint. A backend supplies the networks and the gradient steps, as an
`OffPolicyAgent`; the float work of sampling and normalizing batches happens here, once, for both.

Semantics follow SB3, so that Zoo hyperparameters mean the same: train_freq counts env steps per env,
gradient_steps -1 trains as many steps as transitions were collected, DQN's target_update_interval
counts env steps, training starts once more than learning_starts steps were taken.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.train.core.action_noise import GaussianNoise, OUNoise
from rl2edge.train.core.evaluation import EvalResult
from rl2edge.train.core.nstep import NStepCollector
from rl2edge.train.core.offpolicy_config import (
    DQNConfig,
    OffPolicyConfig,
    RainbowConfig,
    SACConfig,
    TD3Config,
)
from rl2edge.train.core.replay import PrioritizedReplayBuffer, ReplayBatch, ReplayBuffer
from rl2edge.train.core.run import TrainingRun, TrainResult
from rl2edge.train.core.spaces import obs_dim, output_width
from rl2edge.train.core.threads import one_blas_thread

_logger = logging.getLogger(__name__)

LOG_EVERY = 1_000  # env steps between metric rows


class OffPolicyAgent(Protocol):
    """What a backend provides. Observations are normalized float32 numpy arrays [B, obs_dim]."""

    framework: str
    device: str
    stat_names: tuple[str, ...]

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        """Greedy index (DQN) or the deterministic action in [-1, 1]-scaled units (SAC: tanh of the mean)."""

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The behaviour action before the driver's noise: SAC samples its policy; TD3/DDPG/DQN act greedily."""

    def set_learning_rate(self, lr: float) -> None: ...

    def train(self, batch: ReplayBatch) -> np.ndarray:
        """batch.n gradient steps, in order; the mean of stat_names over them (one host sync)."""

    def update_target(self) -> None:
        """DQN: target <- tau * online + (1 - tau) * target (SAC and TD3 update theirs inside `train`)."""

    def save_weights(self, run_dir: Path) -> str: ...

    def get_state(self) -> Any: ...

    def set_state(self, state: Any) -> None: ...


AgentFactory = Callable[[dict[str, Any], Any, int, str], OffPolicyAgent]


def network_spec(cfg: OffPolicyConfig, obs_spec: dict[str, Any], act_spec: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's description of the networks, from which export rebuilds the actor."""
    common = {
        "obs_dim": obs_dim(obs_spec),
        "act_dim": output_width(act_spec),
        "net_arch": [int(w) for w in cfg.net_arch],
        "activation": cfg.activation,
    }
    if isinstance(cfg, RainbowConfig):
        return {
            "type": "rainbow_mlp",
            **common,
            "dueling": bool(cfg.dueling),
            "noisy": bool(cfg.noisy),
            "noisy_sigma0": float(cfg.noisy_sigma0),
            "distributional": bool(cfg.distributional),
            "n_atoms": int(cfg.n_atoms) if cfg.distributional else 1,
            "v_min": float(cfg.v_min),
            "v_max": float(cfg.v_max),
        }
    if isinstance(cfg, DQNConfig):
        return {"type": "dqn_mlp", **common}
    if isinstance(cfg, SACConfig):
        return {"type": "sac_mlp", **common, "log_std_min": -20.0, "log_std_max": 2.0}
    assert isinstance(cfg, TD3Config)
    return {"type": "td3_mlp", **common, "n_critics": int(cfg.n_critics)}


def train_offpolicy(
    env_id: str,
    cfg: OffPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
    device: str = "auto",
    progress: bool | None = None,
    on_evaluation: Callable[[int, EvalResult], bool] | None = None,
) -> TrainResult:
    # numpy's BLAS on one thread for the run, as the PPO rollout has it: after the numpy explorer's
    # 256-wide matmuls OpenBLAS's idle worker spins on sched_yield and holds the second core
    # (tests/test_offpolicy_mechanics.py checks the one thread).
    with one_blas_thread():
        return _train_offpolicy(env_id, cfg, seed, run_dir, make_agent, device, progress, on_evaluation)


def _train_offpolicy(
    env_id: str,
    cfg: OffPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
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
    if len(obs_spec["shape"]) != 1:
        run.close()
        raise ConfigError(
            f"{cfg.algo.upper()} takes flat observations; {env_id} has shape {obs_spec['shape']}"
        )
    n_envs, a_dim = cfg.n_envs, output_width(act_spec)
    network = network_spec(cfg, obs_spec, act_spec)
    agent = make_agent(network, cfg, seed, device)
    capacity = min(cfg.buffer_size, cfg.n_timesteps + n_envs)
    rainbow = cfg if isinstance(cfg, RainbowConfig) else None
    nstep = NStepCollector(rainbow.n_step, rainbow.gamma, n_envs) if rainbow else None
    if rainbow and rainbow.prioritized:
        buffer: ReplayBuffer = PrioritizedReplayBuffer(
            capacity, obs_shape, discrete, a_dim, rainbow.per_alpha, rainbow.per_eps
        )
    else:
        buffer = ReplayBuffer(capacity, obs_shape, discrete, a_dim, with_discounts=rainbow is not None)
    noise: GaussianNoise | OUNoise | None = None
    if isinstance(cfg, TD3Config) and cfg.noise_type == "normal":
        noise = GaussianNoise(cfg.noise_std, a_dim, n_envs, rng)
    elif isinstance(cfg, TD3Config) and cfg.noise_type == "ornstein-uhlenbeck":
        noise = OUNoise(0.15, cfg.noise_std, 1e-2, a_dim, n_envs, rng)  # SB3's theta and dt

    n_iters = max(1, math.ceil(cfg.n_timesteps / n_envs))
    raw_obs, _ = envs.reset(seed=seed)
    norm.update(raw_obs)
    ep_returns = np.zeros(n_envs)
    recent_returns = run.recent_returns
    stats: np.ndarray | None = None
    global_step, next_log = 0, LOG_EVERY
    lr_set: float | None = None  # the learning rate last given to the agent
    target_period = max(cfg.target_update_interval // n_envs, 1) if isinstance(cfg, DQNConfig) else 0
    bar = run.begin(agent, n_iters * n_envs, progress, mininterval=0.5)
    try:
        for it in range(n_iters):
            # ACT: uniform random during warm-up, then the algorithm's exploration.
            if global_step < cfg.learning_starts:
                action = (
                    rng.integers(0, act_spec["n"], size=n_envs)
                    if discrete
                    else rng.uniform(-1.0, 1.0, size=(n_envs, a_dim)).astype(np.float32)
                )
            elif isinstance(cfg, DQNConfig):  # Rainbow's explore draws its noisy layers' noise
                action = agent.explore(norm.normalize(raw_obs)).astype(np.int64)
                explore = rng.random(n_envs) < cfg.epsilon(global_step)
                action[explore] = rng.integers(0, act_spec["n"], size=int(explore.sum()))
            else:
                action = agent.explore(norm.normalize(raw_obs))
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

            if target_period and (it + 1) % target_period == 0:
                agent.update_target()

            # TRAIN: every train_freq steps once warm-up is over; n batches sampled here, stepped by the backend.
            if (it + 1) % cfg.train_freq == 0 and global_step > cfg.learning_starts:
                lr = cfg.learning_rate(1.0 - global_step / cfg.n_timesteps)
                if lr != lr_set:  # TF assigns a variable per optimizer: only when the schedule moves
                    agent.set_learning_rate(lr)
                    lr_set = lr
                n = cfg.gradient_steps if cfg.gradient_steps > 0 else cfg.train_freq * n_envs
                if rainbow is None:
                    stats = agent.train(buffer.sample(n, cfg.batch_size, rng, norm.normalize))
                elif len(buffer):
                    stats = train_rainbow(agent, buffer, n, rainbow, rng, norm.normalize, global_step)

            evaluating = run.evaluation_due(global_step)
            if global_step >= next_log or evaluating:
                next_log = (global_step // LOG_EVERY + 1) * LOG_EVERY
                row: dict[str, float] = {}
                if stats is not None:
                    row.update(zip(agent.stat_names, np.asarray(stats, np.float64).tolist(), strict=True))
                if isinstance(cfg, DQNConfig):
                    row["epsilon"] = cfg.epsilon(global_step)
                if recent_returns:
                    row["rollout_return_mean"] = float(np.mean(recent_returns[-20:]))
                    bar.set_postfix(ret=f"{row['rollout_return_mean']:.1f}", refresh=False)
                if evaluating:
                    run.evaluate_into(row, agent, global_step)
                run.metrics.log(global_step, row)
                if run.stop_requested:
                    break
    finally:
        run.close(bar)
    return run.finish(agent, global_step, network)


def train_rainbow(
    agent: Any,
    buffer: ReplayBuffer,
    n: int,
    cfg: RainbowConfig,
    rng: np.random.Generator,
    normalize: Callable[[np.ndarray], np.ndarray],
    global_step: int,
) -> np.ndarray:
    """n gradient steps, each on a batch sampled after the previous step's priorities were written back.
    Uniform replay samples all n batches at once, as DQN does (the same random draws)."""
    if not isinstance(buffer, PrioritizedReplayBuffer):
        return agent.train_prioritized(buffer.sample(n, cfg.batch_size, rng, normalize))[0]
    beta = cfg.beta(global_step)
    rows = []
    for _ in range(n):
        batch = buffer.sample(1, cfg.batch_size, rng, normalize, beta)
        stats, priorities = agent.train_prioritized(batch)
        buffer.update_priorities(batch.indices, priorities)
        rows.append(stats)
    return np.mean(rows, axis=0)
