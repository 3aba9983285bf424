"""Observations for checks and measurements that must not reuse a policy's own rollouts."""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.train.core.envs import make_env


def random_observations(env_id: str, n: int, seed: int) -> Any:
    """n observations of the env under uniformly random actions (episodes restart as they end): inputs
    for checks and measurements that must not reuse a policy's own rollouts. A Dict env's come as a list
    of its mappings, as a policy's predict takes them."""
    env = make_env(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    try:
        for _ in range(n):
            out.append({k: np.array(v) for k, v in obs.items()} if isinstance(obs, dict) else np.asarray(obs))
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    return out if isinstance(out[0], dict) else np.stack(out)
