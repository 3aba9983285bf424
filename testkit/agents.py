"""Agents as the training driver makes them, for tests that step one by hand: the config from the
algorithm's row, defaults and preset (`config`), the checkpoint's network spec (`network`), the agent from
the row's class for a framework (`make_agent`); and the small off-policy agents with their replay batches
that the mechanics tests share (`small_offpolicy_agent`, `replay_batch`).

Imports neither torch nor TensorFlow: `make_agent` loads the framework the agent's class needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rl2edge.train.algos import build_config, get
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.replay import ReplayBatch


def config(algo: str, env_id: str | None = None, **overrides: object) -> Any:
    """`algo`'s config the production way (train.algos.build_config): its defaults (SB3's), its preset for
    `env_id`, then `overrides`. `env_id` None: the defaults alone (the config logs that no preset applies)."""
    return build_config(env_id, overrides=dict(overrides), algo=algo)


def network(
    algo: str, obs_dim: int, act_dim: int, cfg: Any = None, *, discrete: bool | None = None, **fields: object
) -> NetworkSpec:
    """The checkpoint's network spec as the driver writes it for `cfg` (`algo`'s defaults when None): the
    type from the algorithm's row, net_arch and activation from the config; an on-policy actor-critic's
    `discrete` (required) and `log_std_init`, an off-policy config's `network_fields()`. `fields` replace
    or add entries (net_arch=[16, 16], log_std_init=-0.3, ...)."""
    row = get(algo)
    if cfg is None:
        cfg = row.config_class()()
    spec: dict[str, Any] = {
        "type": row.network,
        "obs_dim": obs_dim,
        "act_dim": act_dim,
        "net_arch": [int(w) for w in cfg.net_arch],
        "activation": cfg.activation,
    }
    if row.on_policy:  # train.core.onpolicy_driver
        if discrete is None:
            raise ValueError(f"{algo}: an actor-critic's spec needs discrete=True or False")
        spec.update(discrete=bool(discrete), log_std_init=cfg.log_std_init)
    else:  # train.core.offpolicy_driver.network_spec
        if discrete is not None:
            raise ValueError(f"{algo}: an off-policy spec has no `discrete` (the row's action space)")
        spec.update(cfg.network_fields())
    spec.update(fields)
    return NetworkSpec.from_json(spec)


def make_agent(
    algo: str,
    framework: str,
    network: NetworkSpec | Callable[[Any], NetworkSpec],
    env_id: str | None = None,
    seed: int = 0,
    **overrides: object,
) -> Any:
    """`algo`'s agent for `framework` on the CPU, as train.algos.train makes it: the row's agent class
    given `network`, `config(algo, env_id, **overrides)` and `seed`. `network` may be a function of that
    config (a spec that follows it, as the driver's does: `lambda cfg: network(algo, ..., cfg)`). The
    config is the agent's `cfg`."""
    cfg = config(algo, env_id, **overrides)
    spec = network(cfg) if callable(network) else network
    return get(algo).agent_class(framework)(spec, cfg, seed, "cpu")


# ---------------------------------------------------------------- small off-policy agents and batches
# Pendulum-sized continuous agents (CartPole-sized for DQN) with 16-16 ReLU networks: what the off-policy
# mechanics tests step (tests/test_offpolicy_mechanics.py, tests/test_numpy_actor.py).
SMALL_OBS, SMALL_ACT = 3, 1
_SMALL_ENV = {"dqn": "CartPole-v1"}  # the others: Pendulum-v1
_DQN_OBS, _DQN_ACT = 4, 2


def small_offpolicy_spec(algo: str, cfg: Any = None) -> NetworkSpec:
    """The small agents' network spec: SAC's, TD3's or DQN's, for `cfg` (the algorithm's defaults when None)."""
    obs, act = (_DQN_OBS, _DQN_ACT) if algo == "dqn" else (SMALL_OBS, SMALL_ACT)
    return network(algo, obs, act, cfg, net_arch=[16, 16], activation="relu")


def small_offpolicy_agent(framework: str, algo: str, seed: int = 0, **overrides: object) -> Any:
    """A small SAC, TD3 or DQN agent on its env's preset (Pendulum-v1; DQN: CartPole-v1) and `overrides`."""
    return make_agent(
        algo,
        framework,
        lambda cfg: small_offpolicy_spec(algo, cfg),
        _SMALL_ENV.get(algo, "Pendulum-v1"),
        seed,
        **overrides,
    )


def replay_batch(n: int, b: int = 8, discrete: bool = False, seed: int = 0) -> ReplayBatch:
    """`n` random minibatches of `b` transitions for the small agents (DQN's with `discrete`), as the
    replay buffer samples them: about one in ten a termination."""
    rng = np.random.default_rng(seed)
    obs_dim = _DQN_OBS if discrete else SMALL_OBS
    actions = (
        rng.integers(0, _DQN_ACT, (n, b)).astype(np.int64)
        if discrete
        else rng.uniform(-1, 1, (n, b, SMALL_ACT)).astype(np.float32)
    )
    return ReplayBatch(
        rng.standard_normal((n, b, obs_dim)).astype(np.float32),
        actions,
        rng.standard_normal((n, b)).astype(np.float32),
        rng.standard_normal((n, b, obs_dim)).astype(np.float32),
        (rng.random((n, b)) < 0.1).astype(np.float32),
    )
