"""PPO's (and A2C's) framework-neutral driver, top to bottom in execution order: seeding, envs, rollout with
recorded log-probs and values, GAE and minibatches (train.core.rollout), the update loop over epochs,
periodic deterministic evaluation, metrics, checkpoint. A backend (torch or tf) supplies only the
network, the loss and the optimizer step, as a `PPOAgent`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.train.core.config import A2CConfig, PPOConfig
from rl2edge.train.core.finish import TrainingRun, TrainResult
from rl2edge.train.core.normalization import RewardScaler
from rl2edge.train.core.rollout import Minibatch, RolloutBuffer, check_minibatch
from rl2edge.train.core.spaces import obs_dim, output_width

_logger = logging.getLogger(__name__)

STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


class PPOAgent(Protocol):
    """What a backend provides. Observations are normalized float32 numpy arrays [B, obs_dim]."""

    framework: str
    device: str

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions; return (actions, log-probs, values), recorded for the update."""

    def value(self, obs: np.ndarray) -> np.ndarray: ...

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        """Argmax index (discrete) or the mean in [-1, 1]-scaled units (Box)."""

    def set_learning_rate(self, lr: float) -> None: ...

    def train_minibatches(self, mbs: list[Minibatch], clip: float) -> np.ndarray:
        """One gradient step per minibatch, in order; the mean of STAT_NAMES over them (one host sync)."""

    def save_weights(self, run_dir: Path) -> str:
        """Write the weights atomically; return the file's name."""

    def get_state(self) -> Any:
        """A copy of the network's weights, in memory."""

    def set_state(self, state: Any) -> None: ...


AgentFactory = Callable[[dict[str, Any], PPOConfig, int, str], PPOAgent]


def train_ppo(
    env_id: str,
    cfg: PPOConfig | A2CConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
    device: str = "auto",
    progress: bool | None = None,
) -> TrainResult:
    # SEEDING: once, here. Env seeds are given at the first reset; the agent factory seeds its framework
    # before it initializes anything; numpy's generator drives the minibatch order.
    rng = np.random.default_rng(seed)
    run = TrainingRun(env_id, cfg, seed, run_dir)
    envs, obs_spec, act_spec, norm, to_env = run.envs, run.obs_spec, run.act_spec, run.norm, run.to_env
    discrete, obs_shape = run.discrete, run.obs_shape
    network = {
        "type": "actor_critic_mlp",
        "obs_dim": obs_dim(obs_spec),
        "act_dim": output_width(act_spec),
        "discrete": discrete,
        "net_arch": list(cfg.net_arch),
        "activation": cfg.activation,
        "log_std_init": cfg.log_std_init,
    }
    agent = make_agent(network, cfg, seed, device)
    buffer = RolloutBuffer(cfg.n_steps, cfg.n_envs, obs_shape, discrete, output_width(act_spec))

    batch_steps = cfg.n_envs * cfg.n_steps
    minibatch = cfg.batch_size or batch_steps  # A2C: the whole rollout, one gradient step
    stat_names = getattr(agent, "stat_names", STAT_NAMES)
    n_updates = max(1, math.ceil(cfg.n_timesteps / batch_steps))
    gamma32 = np.float32(cfg.gamma)
    scale = RewardScaler(cfg.n_envs, cfg.gamma) if cfg.normalize_reward else None
    raw_obs, _ = envs.reset(seed=seed)
    norm.update(raw_obs)
    ep_returns = np.zeros(cfg.n_envs)
    recent_returns = run.recent_returns
    global_step = 0
    bar = run.begin(agent, n_updates * batch_steps, progress)
    try:
        for update in range(n_updates):
            progress_remaining = 1.0 - update / n_updates
            clip = cfg.clip_range(progress_remaining) if cfg.clip_range is not None else 0.0
            lr = cfg.learning_rate(progress_remaining)
            agent.set_learning_rate(lr)

            # ROLLOUT: act, and record log-probs and values now so the update needs no second forward pass.
            for _ in range(cfg.n_steps):
                obs = norm.normalize(raw_obs)
                action, logp, value = agent.act(obs)
                raw_obs, reward, terminated, truncated, info = envs.step(to_env(action))
                ep_returns += reward  # raw: metrics and evaluations never see the scaled rewards
                reward = reward.astype(np.float32) if scale is None else scale(reward, terminated | truncated)
                # CRUCIAL: a time-limit truncation is not a terminal state; bootstrap it with V(final obs).
                bootstrap = truncated & ~terminated
                if bootstrap.any():
                    final = np.stack([info["final_obs"][i] for i in np.flatnonzero(bootstrap)])
                    reward[bootstrap] += gamma32 * agent.value(norm.normalize(final))
                done = terminated | truncated
                buffer.add(obs, action, logp, value, reward, done)
                for i in np.flatnonzero(done):
                    recent_returns.append(float(ep_returns[i]))
                    ep_returns[i] = 0.0
                norm.update(raw_obs)
                global_step += cfg.n_envs
            buffer.finish(agent.value(norm.normalize(raw_obs)), cfg.gamma, cfg.gae_lambda)

            # UPDATE: n_epochs over shuffled minibatches; the backend does the gradient steps. Without a
            # target KL all epochs go to the backend at once (TF runs them in one compiled call).
            epochs = [
                list(buffer.minibatches(minibatch, rng, cfg.normalize_advantage)) for _ in range(cfg.n_epochs)
            ]
            if update == 0:
                check_minibatch(epochs[0][0], obs_shape, discrete, output_width(act_spec))
            if cfg.target_kl is None:
                stats_arr = agent.train_minibatches([mb for epoch in epochs for mb in epoch], clip)
            else:
                done_epochs = []
                for epoch_mbs in epochs:
                    done_epochs.append(agent.train_minibatches(epoch_mbs, clip))
                    if done_epochs[-1][3] > 1.5 * cfg.target_kl:
                        break
                stats_arr = np.mean(done_epochs, axis=0)
            stats = dict(zip(stat_names, np.asarray(stats_arr, np.float64).tolist(), strict=True))
            bar.update(batch_steps)

            row = {"lr": lr, **({"clip_range": clip} if cfg.clip_range is not None else {}), **stats}
            if recent_returns:
                row["rollout_return_mean"] = float(np.mean(recent_returns[-20:]))
                bar.set_postfix(ret=f"{row['rollout_return_mean']:.1f}")
            if run.evaluation_due(global_step):
                run.evaluate_into(row, agent, global_step)
            run.metrics.log(global_step, row)
    finally:
        run.close(bar)
    return run.finish(agent, global_step, network)
