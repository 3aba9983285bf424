"""The on-policy driver of PPO and A2C, and of their recurrent forms, framework-neutral, top to bottom in
execution order: seeding, envs, rollout with recorded log-probs and values, GAE and minibatches
(train.core.rollout; a recurrent policy's sequences, train.core.recurrent_rollout), the update loop over
epochs, periodic deterministic evaluation, metrics, checkpoint. A backend (torch or tf) supplies only the
network, the loss and the optimizer step, as a `OnPolicyAgent`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec
from rl2edge.train.core.config import OnPolicyConfig
from rl2edge.train.core.encoder_spec import encoder_spec
from rl2edge.train.core.evaluation import EvalResult
from rl2edge.train.core.network_spec import EncoderSpec, NetworkSpec
from rl2edge.train.core.normalization import RewardScaler, RunningNormalizer
from rl2edge.train.core.numpy_policy import RolloutWeights
from rl2edge.train.core.rollout import Minibatch, RolloutBuffer
from rl2edge.train.core.rollout_collector import RolloutCollector, Segment
from rl2edge.train.core.run import TrainingRun, TrainResult

STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


class OnPolicyAgent(Protocol):
    """What a backend provides. Observations are normalized float32 numpy arrays [B, obs_dim]."""

    framework: str
    device: str

    def rollout_weights(self) -> RolloutWeights:
        """The current weights as numpy arrays: the rollout acts with them (train.core.numpy_policy)."""

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The framework's own sampling with the given per-env noise (Gumbel or standard normal,
        [B, width]): (actions, log-probs, values). The reference the numpy rollout policy is tested against."""

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


AgentFactory = Callable[[NetworkSpec, OnPolicyConfig, int, str], OnPolicyAgent]
PoolFactory = Callable[[str, OnPolicyConfig, int, NetworkSpec, ActionSpec], "RolloutPool"]
"""(env_id, cfg, seed, network, act_spec) -> the pool the rollouts come from."""


def onpolicy_network(
    cfg: OnPolicyConfig,
    network_type: str,
    obs_dim: int,
    act_dim: int,
    discrete: bool,
    encoder: EncoderSpec | None = None,
    action_nvec: tuple[int, ...] | None = None,
) -> NetworkSpec:
    """The checkpoint's network of an actor-critic: the MLP's fields, the config's own (a recurrent cell's),
    the encoder of image keys (train.core.encoder_spec), and the frame stack (Ray rollout workers make
    their envs from it)."""
    return NetworkSpec(
        type=network_type,
        obs_dim=obs_dim,
        act_dim=act_dim,
        discrete=discrete,
        action_nvec=action_nvec,
        net_arch=tuple(cfg.net_arch),
        activation=cfg.activation,
        log_std_init=cfg.log_std_init,
        **cfg.network_fields(),
        encoder=encoder,
        frame_stack=int(cfg.frame_stack),
    )


def train_onpolicy(
    env_id: str,
    cfg: OnPolicyConfig,
    seed: int,
    run_dir: Path,
    make_agent: AgentFactory,
    network_type: str,
    device: str = "auto",
    progress: bool | None = None,
    on_evaluation: Callable[[int, EvalResult], bool] | None = None,
    make_pool: PoolFactory | None = None,
    replicas: Replicas | None = None,
) -> TrainResult:
    """`cfg`: the family's config; the update also reads batch_size, n_epochs, clip_range and target_kl,
    PPO's fields, which A2C's config holds as class attributes (one step on the whole rollout, no clip).
    `network_type`: the checkpoint's network type (the algorithm's row, train.algos). `make_pool`, when
    given, makes the pool the rollouts come from instead of the learner's own envs (train.algos hands in
    the Ray actors of --rollout-workers, train.distributed); the learner broadcasts the weights and
    statistics before each rollout and gathers the data in env order.

    A recurrent network (the config's `network_fields` give its cell) brings its own rollout parts
    (train.core.recurrent_rollout): a collector that carries each env's state, a buffer of whole env
    sequences replayed from the state they began with, and an evaluator that resets the state per episode;
    the loop is this one.

    `replicas`, in a data-parallel job (train.data_parallel): this process steps its share of the envs, the
    rollouts are gathered onto every process, `make_agent` gives an agent that trains on this process's
    share of each minibatch (train.data_parallel.sharding); only the lead (rank 0) evaluates, logs and
    writes the checkpoint, and a stop on any process stops all at the same update."""
    # SEEDING: once, here. Env seeds are given at the first reset; the agent factory seeds its framework
    # before it initializes anything; numpy's generator drives the minibatch order.
    rng = np.random.default_rng(seed)
    # a data-parallel process makes only its share of the envs (first .. first + count - 1)
    first, count = replicas.env_share(cfg.n_envs) if replicas is not None else (0, cfg.n_envs)
    run = TrainingRun(env_id, cfg, seed, run_dir, on_evaluation, n_envs=count)
    envs, obs_spec, act_spec, norm, to_env = run.envs, run.obs_spec, run.act_spec, run.norm, run.to_env
    discrete, obs_shape = run.discrete, run.obs_shape
    nvec = act_spec.nvec if act_spec.multi_discrete else None
    network = onpolicy_network(
        cfg, network_type, obs_spec.size, act_spec.output_width, discrete, encoder_spec(obs_spec), nvec
    )
    collector_class, buffer_class = RolloutCollector, RolloutBuffer
    if network.recurrent:
        from rl2edge.train.core.recurrent_rollout import RecurrentCollector, SequenceBuffer, StatefulEvaluator

        if network.encoder is not None or make_pool is not None:  # train.algos refuses both first
            raise ConfigError(
                f"{cfg.algo}: recurrent policies take vector observations, rollouts in one process"
            )
        collector_class, buffer_class = RecurrentCollector, SequenceBuffer
        run.act_fn = lambda agent_, norm_: StatefulEvaluator(agent_, norm_, to_env, run.flatten, network)
    agent = make_agent(network, cfg, seed, device)
    lead = replicas is None or replicas.lead
    buffer = buffer_class(cfg.n_steps, cfg.n_envs, obs_shape, discrete, act_spec.output_width, nvec)

    # The update's settings: PPO's fields, which A2C's config holds as class attributes (no clip, one epoch)
    settings: Any = cfg
    batch_steps = cfg.n_envs * cfg.n_steps
    minibatch = settings.batch_size or batch_steps  # A2C: the whole rollout, one gradient step
    stat_names = getattr(agent, "stat_names", STAT_NAMES)
    n_updates = max(1, math.ceil(cfg.n_timesteps / batch_steps))
    scale = RewardScaler(cfg.n_envs, cfg.gamma) if cfg.normalize_reward else None
    live_norm = cfg.norm_obs_update == "step"
    if make_pool is not None:
        pool: RolloutPool = make_pool(env_id, cfg, seed, network, act_spec)
        run.envs.close()  # the learner steps no env itself
    elif replicas is not None:
        # Forward passes over the share's rows only (pad_to: count): a rank's acting costs its share, where
        # the Ray workers' padding to every env's row buys bit-equal rollouts at the cost of the whole batch.
        collector = collector_class(
            env_id, first, count, seed, cfg.gamma, network, norm, False, to_env, count, envs=envs
        )
        pool = GatheredPool(collector, replicas.gather)
    else:
        collector = collector_class(
            env_id, 0, cfg.n_envs, seed, cfg.gamma, network, norm, live_norm, to_env, cfg.n_envs, envs=envs
        )
        pool = LocalRolloutPool(collector)
    norm.update(pool.initial_obs())
    recent_returns = run.recent_returns
    global_step = 0
    bar = run.begin(agent, n_updates * batch_steps, progress if lead else False)
    try:
        for update in range(n_updates):
            progress_remaining = 1.0 - update / n_updates
            clip = settings.clip_range(progress_remaining) if settings.clip_range is not None else 0.0
            lr = cfg.learning_rate(progress_remaining)
            agent.set_learning_rate(lr)

            # ROLLOUT: act, and record log-probs and values now so the update needs no second forward pass
            # (a recurrent policy: each env's state carried, its episode starts and states recorded too).
            seg = pool.collect(cfg.n_steps, agent, norm)
            assemble(seg, buffer, scale, None if live_norm else norm)
            recent_returns.extend(ret for _, _, ret in seg.episodes)
            global_step += batch_steps
            buffer.finish(seg.last_values, cfg.gamma, cfg.gae_lambda)

            # UPDATE: n_epochs over shuffled minibatches (a recurrent policy's: whole env sequences, or
            # chunks of one); the backend does the gradient steps. Without a target KL all epochs go to the
            # backend at once (TF runs them in one compiled call).
            epochs = [
                list(buffer.minibatches(minibatch, rng, cfg.normalize_advantage))
                for _ in range(settings.n_epochs)
            ]
            if update == 0:
                buffer.check_minibatch(epochs[0][0])
            if settings.target_kl is None:
                stats_arr = agent.train_minibatches([mb for epoch in epochs for mb in epoch], clip)
            else:
                done_epochs = []
                for epoch_mbs in epochs:
                    done_epochs.append(agent.train_minibatches(epoch_mbs, clip))
                    if done_epochs[-1][3] > 1.5 * settings.target_kl:
                        break
                stats_arr = np.mean(done_epochs, axis=0)
            stats = dict(zip(stat_names, np.asarray(stats_arr, np.float64).tolist(), strict=True))
            bar.update(batch_steps)

            row = {"lr": lr, **({"clip_range": clip} if settings.clip_range is not None else {}), **stats}
            if recent_returns:
                row["rollout_return_mean"] = float(np.mean(recent_returns[-20:]))
                bar.set_postfix(ret=f"{row['rollout_return_mean']:.1f}")
            if lead:
                if run.evaluation_due(global_step):
                    run.evaluate_into(row, agent, global_step)
                run.log(global_step, row)
            stop = run.stop_requested
            if replicas is not None:
                stop = replicas.any(stop)  # every process stops at the same update
            if stop:
                break
    finally:
        run.close(bar)
        pool.close()
    if not lead:  # the lead writes the run; the others' weights are the same
        return run.unwritten(global_step)
    return run.finish(agent, global_step, network, replicas.world if replicas is not None else 1)


def assemble(
    seg: Segment, buffer: RolloutBuffer, scale: RewardScaler | None, norm: RunningNormalizer | None
) -> None:
    """The learner's side of a collected rollout, in step order over all envs: reward scaling, the
    truncation bootstrap (added after scaling, as SB3 does), the buffer (a sequence buffer also takes the
    episode starts and states), and (`norm`, when statistics move per rollout) the normalization
    statistics, updated with each step's observations in turn."""
    buffer.begin_segment(seg)
    for t in range(seg.rewards.shape[0]):
        reward = seg.rewards[t].astype(np.float32) if scale is None else scale(seg.rewards[t], seg.dones[t])
        boot = seg.boot_mask[t]
        reward[boot] += seg.boot_values[t][boot]
        buffer.add(seg.obs[t], seg.actions[t], seg.logprobs[t], seg.values[t], reward, seg.dones[t])
        if norm is not None:
            assert seg.raw_obs is not None, (
                "a pool that moves the statistics per rollout returns raw observations"
            )
            norm.update(seg.raw_obs[t])


class RolloutPool(Protocol):
    """Where the rollouts come from: the learner's own envs, or Ray actors holding a share each."""

    def initial_obs(self) -> np.ndarray:
        """The raw observations of every env after its first reset (the statistics' first update)."""

    def collect(self, n_steps: int, agent: OnPolicyAgent, norm: RunningNormalizer) -> Segment:
        """n_steps of every env with the agent's current weights and `norm`'s current statistics."""

    def close(self) -> None: ...


class Replicas(Protocol):
    """A data-parallel job as the driver sees it (train.data_parallel.group.Replicas)."""

    lead: bool
    world: int

    def env_share(self, n_envs: int) -> tuple[int, int]:
        """(first, count): this process's envs."""

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order."""

    def any(self, flag: bool) -> bool:
        """Whether any process's flag is set."""


class LocalRolloutPool:
    """Every env in this process, acted on by the learner's own agent and normalizer."""

    def __init__(self, collector: RolloutCollector):
        self.collector = collector

    def initial_obs(self) -> np.ndarray:
        return self.collector.raw_obs

    def collect(self, n_steps: int, agent: OnPolicyAgent, norm: RunningNormalizer) -> Segment:
        return self.collector.collect(n_steps, agent.rollout_weights())

    def close(self) -> None:
        self.collector.close()


class GatheredPool(LocalRolloutPool):
    """This process's share of the envs, its rollouts gathered with the other processes' in env order: every
    process of a data-parallel job gets the rollout one process over all the envs would collect."""

    def __init__(self, collector: RolloutCollector, gather: Callable[[Any], list[Any]]):
        super().__init__(collector)
        self.gather = gather

    def initial_obs(self) -> np.ndarray:
        return np.concatenate(self.gather(self.collector.raw_obs))

    def collect(self, n_steps: int, agent: OnPolicyAgent, norm: RunningNormalizer) -> Segment:
        return Segment.concat(self.gather(super().collect(n_steps, agent, norm)))
