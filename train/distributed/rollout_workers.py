"""PPO's (and A2C's) rollouts spread over Ray actors: each actor holds a contiguous share of the envs and
a copy of the policy, and collects whole rollouts (one round trip per update, not per step, so that a
worker on another machine costs one network exchange per rollout). Before each rollout the learner
broadcasts its weights (numpy arrays: the actors import neither torch nor TensorFlow) and normalization
statistics; the segments come back in env order and are
assembled as one process would have (train.core.rollout_collector says what makes that exact)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.numpy_policy import RolloutWeights
from rl2edge.train.core.rollout_collector import RolloutCollector, Segment, share_bounds

_logger = logging.getLogger(__name__)


def env_slices(n_envs: int, workers: int) -> list[tuple[int, int]]:
    """(first, count) of each worker's share: contiguous, sizes differing by at most one."""
    assert 0 < workers <= n_envs, "checked by train.algos.check_rollout_workers"
    bounds = [share_bounds(n_envs, workers, w) for w in range(workers)]
    return [(lo, hi - lo) for lo, hi in bounds]


class RolloutWorker:
    """One actor: its envs, acting with the weights and statistics it is sent each rollout (numpy only:
    no torch or TensorFlow in the actor)."""

    def __init__(
        self,
        env_id: str,
        cfg: Any,
        seed: int,
        first: int,
        count: int,
        network: NetworkSpec,
        act_spec: ActionSpec,
    ):
        from rl2edge.specs import ActionTransform

        logging.basicConfig(level=logging.WARNING)
        norm = RunningNormalizer((network.obs_dim,), clip=cfg.norm_obs_clip, enabled=cfg.normalize_obs)
        self.collector = RolloutCollector(
            env_id,
            first,
            count,
            seed,
            cfg.gamma,
            network,
            norm,
            False,
            ActionTransform(act_spec).to_env,
            cfg.n_envs,
        )

    def initial_obs(self) -> np.ndarray:
        return self.collector.raw_obs

    def collect(self, n_steps: int, weights: RolloutWeights, norm: RunningNormalizer) -> Segment:
        self.collector.norm = norm
        return self.collector.collect(n_steps, weights)


class RayRolloutPool:
    """The learner's handle on the actors (train.core.onpolicy_driver.RolloutPool)."""

    def __init__(
        self,
        workers: int,
        env_id: str,
        cfg: Any,
        seed: int,
        network: NetworkSpec,
        act_spec: ActionSpec,
    ):
        from rl2edge.train.distributed.cluster import require_ray

        self.ray = ray = require_ray()
        if not ray.is_initialized():
            raise ConfigError("--rollout-workers needs a Ray session (rl2edge train starts one)")
        if cfg.norm_obs_update != "rollout":
            raise ConfigError("--rollout-workers needs norm_obs_update: rollout (rl2edge train sets it)")
        slices = env_slices(cfg.n_envs, workers)
        actor = ray.remote(num_cpus=1)(RolloutWorker)
        self.actors = [actor.remote(env_id, cfg, seed, f, c, network, act_spec) for f, c in slices]
        _logger.info("rollout workers: %s envs each", [c for _, c in slices])

    def initial_obs(self) -> np.ndarray:
        return np.concatenate(self.ray.get([a.initial_obs.remote() for a in self.actors]))

    def collect(self, n_steps: int, agent: Any, norm: RunningNormalizer) -> Segment:
        weights = self.ray.put(agent.rollout_weights())  # once into the object store; every actor reads it
        parts = self.ray.get([a.collect.remote(n_steps, weights, norm) for a in self.actors])
        return Segment.concat(parts)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
