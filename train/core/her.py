"""Hindsight experience replay (Andrychowicz et al. 2017) as SB3's HerReplayBuffer does it, for SAC, TD3,
DDPG and DQN on goal-conditioned Dict plants (`observation`, `achieved_goal`, `desired_goal`, and the
env's vectorized `compute_reward(achieved_goal, desired_goal, info)`: an AGV driving to a station, an arm
reaching).

SB3's conventions, kept so that a Zoo file means the same: `replay_buffer_class: HerReplayBuffer` with
`replay_buffer_kwargs: {n_sampled_goal: 4, goal_selection_strategy: future}`. A sampled batch is
1/(n_sampled_goal + 1) real transitions and the rest relabelled: the desired goal of the observation and
of the next observation replaced by a goal achieved in the same episode (`future`: at this transition or
a later one, inclusive, as SB3; `final`: the episode's last; `episode`: any of its transitions), the
reward recomputed by the env for that goal; `dones` stay the env's terminations (a time limit is
bootstrapped). Only transitions of finished episodes are sampled; an episode the ring starts to overwrite
is withdrawn whole. Relabelling happens on the raw observations, before the normalization, so the
frozen statistics that travel in the artifact are those of the observations the env really gave.

The transitions of a step are the n_envs of one `add`, so the buffer is a ring of rows of n_envs (a row
is a step, an env is a column), with each env's episodes in its column."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, TrainingError
from rl2edge.specs import ObservationSpec
from rl2edge.train.core.finite_check import check_rewards
from rl2edge.train.core.replay import ReplayBatch, ReplayBuffer

GOAL_KEYS = ("achieved_goal", "desired_goal")
STRATEGIES = ("future", "final", "episode")
HER_CLASS = "HerReplayBuffer"
HER_KWARGS = {"n_sampled_goal": 4, "goal_selection_strategy": "future"}  # SB3's defaults

RewardFn = Callable[[np.ndarray, np.ndarray, Any], Any]


def her_options(kwargs: dict[str, Any]) -> tuple[int, str]:
    """(n_sampled_goal, goal_selection_strategy) from `replay_buffer_kwargs`, SB3's defaults filled in; a
    one-line error naming what is wrong."""
    unknown = sorted(set(kwargs) - set(HER_KWARGS))
    if unknown:
        raise ConfigError(
            f"replay_buffer_kwargs: unknown {unknown}; HerReplayBuffer takes {sorted(HER_KWARGS)}"
        )
    opts = {**HER_KWARGS, **kwargs}
    n, strategy = opts["n_sampled_goal"], opts["goal_selection_strategy"]
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 1000:
        raise ConfigError(
            f"replay_buffer_kwargs: n_sampled_goal must be an integer from 0 to 1000, got {n!r}"
        )
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"replay_buffer_kwargs: goal_selection_strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    return int(n), str(strategy)


def goal_slices(spec: ObservationSpec, env_id: str) -> tuple[slice, slice]:
    """Where the achieved and the desired goal are in the flat observation; a one-line refusal of a plant
    that has no goals to relabel."""
    parts = dict(spec.key_slices)
    missing = [k for k in GOAL_KEYS if k not in parts]
    if missing:
        raise ConfigError(
            f"HerReplayBuffer needs a goal-conditioned Dict observation with keys {list(GOAL_KEYS)}; {env_id} "
            f"has {list(parts) if parts else 'a Box observation'}. Drop replay_buffer_class, or give the env "
            "those keys and a compute_reward(achieved_goal, desired_goal, info)"
        )
    achieved, desired = parts["achieved_goal"], parts["desired_goal"]
    if achieved.stop - achieved.start != desired.stop - desired.start:
        raise ConfigError(
            f"{env_id}: achieved_goal has {achieved.stop - achieved.start} values and desired_goal "
            f"{desired.stop - desired.start}; HER puts one in the place of the other"
        )
    return achieved, desired


class HerReplayBuffer(ReplayBuffer):
    def __init__(
        self,
        capacity: int,
        obs_size: int,
        discrete: bool,
        act_dim: int,
        n_envs: int,
        goals: tuple[slice, slice],
        compute_reward: RewardFn,
        n_sampled_goal: int = 4,
        strategy: str = "future",
        pixels: np.ndarray | None = None,
    ):
        rows = max(1, int(capacity) // n_envs)
        super().__init__(rows * n_envs, (obs_size,), discrete, act_dim, pixels=pixels)
        self.n_envs, self.rows = n_envs, rows
        self.achieved, self.desired = goals
        self.compute_reward, self.strategy = compute_reward, strategy
        self.her_ratio = 1.0 - 1.0 / (n_sampled_goal + 1)
        self.ep_start = np.zeros((rows, n_envs), np.int64)  # the row of the episode's first step
        self.ep_length = np.zeros((rows, n_envs), np.int64)  # 0: not finished yet, or withdrawn
        self._current_start = np.zeros(n_envs, np.int64)

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        discounts: np.ndarray | None = None,
    ) -> np.ndarray:
        if len(rewards) != self.n_envs:
            raise ValueError(f"HER adds one step of the {self.n_envs} envs at a time, not {len(rewards)}")
        row = self.pos // self.n_envs
        # a finished episode that this row starts to overwrite is withdrawn whole (SB3's rule)
        for env in np.flatnonzero(self.ep_length[row] > 0):
            start, length = self.ep_start[row, env], self.ep_length[row, env]
            self.ep_length[(start + np.arange(length)) % self.rows, env] = 0
        self.ep_start[row] = self._current_start
        self.ep_length[row] = 0
        return super().add(obs, actions, rewards, next_obs, terminated, discounts)

    def mark_episode_ends(self, done: np.ndarray) -> None:
        """The envs whose episode ended (terminated or truncated) at the step just added."""
        row = (self.pos // self.n_envs - 1) % self.rows
        for env in np.flatnonzero(done):
            start = int(self._current_start[env])
            length = (row - start) % self.rows + 1
            self.ep_length[(start + np.arange(length)) % self.rows, env] = length
            self._current_start[env] = (row + 1) % self.rows

    def ready(self) -> bool:
        return bool((self.ep_length > 0).any())

    def sample(
        self,
        n: int,
        batch_size: int,
        rng: np.random.Generator,
        normalize: Callable[[np.ndarray], np.ndarray],
    ) -> ReplayBatch:
        valid = np.flatnonzero(self.ep_length.reshape(-1) > 0)  # flat index: row * n_envs + env
        if valid.size == 0:
            raise ValueError("no finished episode to sample yet; raise learning_starts past one episode")
        idx = valid[rng.integers(0, valid.size, size=(n, batch_size))]
        obs, next_obs = self.obs[idx], self._next_obs(idx)  # copies: relabelled in place
        rewards = self.rewards[idx].copy()
        k = int(self.her_ratio * batch_size)  # the first k of each batch are relabelled
        if k:
            virtual = idx[:, :k]
            goals = self._goals(virtual, rng)
            obs[:, :k, self.desired] = goals
            next_obs[:, :k, self.desired] = goals
            achieved = next_obs[:, :k, self.achieved].reshape(n * k, -1)
            infos = np.array([{} for _ in range(n * k)])  # no info is stored; SB3 stores the env's
            reward = np.asarray(self.compute_reward(achieved, goals.reshape(n * k, -1), infos), np.float32)
            if reward.size != n * k:  # a scalar from a compute_reward written for one goal at a time
                raise TrainingError(
                    f"the env's compute_reward gave {reward.size} reward(s) for a batch of {n * k} goals "
                    f"(shape {reward.shape}); HER calls it on a batch, as SB3 does: it must return one reward "
                    "per row of achieved_goal (use numpy operations over the last axis)"
                )
            check_rewards(reward, "the env's compute_reward (on HER's relabeled goals)")
            rewards[:, :k] = reward.reshape(n, k)
        return ReplayBatch(
            normalize(obs),
            self.actions[idx],
            rewards,
            normalize(next_obs),
            self.dones[idx],
            None,
            np.ones(idx.shape, np.float32),
            idx,
        )

    def _goals(self, idx: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A goal achieved in the episode of each transition at `idx`, by the strategy."""
        rows, envs = idx // self.n_envs, idx % self.n_envs
        start, length = self.ep_start[rows, envs], self.ep_length[rows, envs]
        if self.strategy == "final":
            step = length - 1
        elif self.strategy == "future":
            step = rng.integers((rows - start) % self.rows, length)  # this step or a later one
        else:  # episode
            step = rng.integers(0, length)
        at = ((start + step) % self.rows) * self.n_envs + envs
        return self._next_obs(at)[..., self.achieved]


def her_buffer(cfg: Any, run: Any, capacity: int, act_dim: int) -> HerReplayBuffer:
    """The HER buffer of an off-policy run (`cfg` an OffPolicyConfig, `run` its TrainingRun): the goals'
    places from the env's Dict spec, compute_reward from the env (a wrapper's too)."""
    goals = goal_slices(run.frame_spec, run.env_id)
    env = run.envs.envs[0]
    try:
        compute_reward = env.get_wrapper_attr("compute_reward")
    except AttributeError:
        raise ConfigError(
            f"HerReplayBuffer needs the env's compute_reward(achieved_goal, desired_goal, info); {run.env_id} "
            "has none"
        ) from None
    limit = env.spec.max_episode_steps if env.spec is not None else None
    rows = capacity // cfg.n_envs
    if limit is not None and rows <= limit:
        raise ConfigError(
            f"HerReplayBuffer: buffer_size {cfg.buffer_size} holds {rows} steps of each of the {cfg.n_envs} envs, "
            f"not one whole episode of {limit}; raise buffer_size (and n_timesteps) above {limit * cfg.n_envs}"
        )
    n_sampled_goal, strategy = her_options(cfg.replay_buffer_kwargs)
    return HerReplayBuffer(
        capacity,
        run.obs_spec.size,
        run.discrete,
        act_dim,
        cfg.n_envs,
        goals,
        compute_reward,
        n_sampled_goal,
        strategy,
        pixels=run.norm.raw,
    )
