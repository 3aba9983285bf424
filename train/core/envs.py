"""Environment creation: registered Gymnasium ids (`Env-v0`, or `module:Env-v0` for an id a module registers
on import) and a user's own `package.module:EnvClass`."""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rl2edge.errors import ConfigError
from rl2edge.specs import ObservationSpec
from rl2edge.train.core.env_check import CheckedEnv
from rl2edge.train.core.frame_stack import StackedObservation
from rl2edge.train.core.partial_envs import register as _register_partial_envs
from rl2edge.train.core.spaces import (
    FlatBoxObservation,
    FlatDictObservation,
    observation_spec,
)

_logger = logging.getLogger(__name__)
_register_partial_envs()  # the Zoo's NoVel tasks under their ids


def _env_factory(env_id: str, **kwargs: Any) -> Callable[[], gym.Env]:
    # 'package.module:EnvClass' names a user's class; 'module:Env-v0' is Gymnasium's own syntax for an
    # id that module registers on import (highway-env's 'highway_env:highway-fast-v0'). Import the module,
    # take the class if it is one, else look the id up without the prefix, as gymnasium.make does.
    registered = env_id
    if ":" in env_id:
        module_name, _, registered = env_id.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"cannot import module {module_name!r} for env {env_id!r}: {exc}") from exc
        except (Exception, SystemExit) as exc:  # the user's module fails as it loads: a SyntaxError, sys.exit
            what = f"exits ({exc.code})" if isinstance(exc, SystemExit) else f"raises {type(exc).__name__}"
            raise ConfigError(
                f"module {module_name!r} of env {env_id!r} {what} when imported: {str(exc)[:200]}; "
                "fix it so that `python -c 'import " + module_name + "'` runs"
            ) from None
        cls = getattr(module, registered, None)
        if isinstance(cls, type) and issubclass(cls, gym.Env):
            return lambda: cls(**kwargs)
    try:
        gym.spec(registered)
    except gym.error.Error as exc:
        raise ConfigError(
            f"unknown environment id {env_id!r} ({exc}); use a registered Gymnasium id such as CartPole-v1, "
            "'package.module:Env-v0' for an id that module registers on import, or 'package.module:EnvClass' "
            "for your own gymnasium.Env subclass"
        ) from None
    # the full id: gymnasium.make imports the module again where it is called (a Ray worker, plc-sim)
    return lambda: gym.make(env_id, **kwargs)


def check_env_id(env_id: str) -> None:
    """Fail early, with a clear message, on an env id that cannot be made."""
    _env_factory(env_id)


def make_env(env_id: str, **kwargs: Any) -> gym.Env:
    env = _env_factory(env_id, **kwargs)()
    if env.spec is None or env.spec.max_episode_steps is None:
        _logger.debug("env %s has no time limit", env_id)
    return env


def make_vec_env(env_id: str, n_envs: int, frame_stack: int = 1) -> gym.vector.SyncVectorEnv:
    """n copies in one process, as training sees them: a Dict observation as one vector
    (FlatDictObservation), a matrix or image Box as one vector (FlatBoxObservation), the last `frame_stack` observations stacked (train.core.frame_stack); an env that
    raises, answers in the old API, in another shape than its space, or with a NaN or inf stops training
    in one line (train.core.env_check). SAME_STEP
    autoreset keeps the final observation of each episode in infos['final_obs'], which PPO needs to
    bootstrap truncated episodes."""
    factory = _env_factory(env_id)

    def make(index: int) -> gym.Env:
        env = CheckedEnv(factory(), env_id, index)  # every answer as the env gives it, keys and all
        space = env.observation_space
        if isinstance(space, gym.spaces.Dict):
            env = FlatDictObservation(env)
        elif isinstance(space, gym.spaces.Box) and len(space.shape) > 1:
            # a (5, 5) matrix, flattened for the MLP, or an image, for its Nature-CNN: its shape kept
            env = FlatBoxObservation(env)
        return StackedObservation(env, frame_stack) if frame_stack > 1 else env

    return gym.vector.SyncVectorEnv(
        [functools.partial(make, i) for i in range(n_envs)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def vec_observation_spec(envs: gym.vector.SyncVectorEnv) -> ObservationSpec:
    """The observation as the env declares it (a Dict keeps its keys; one frame of a stack), not the
    vector training sees."""
    first = envs.envs[0]
    if isinstance(first, StackedObservation):
        first = first.env
    if isinstance(first, FlatDictObservation):
        return first.spec_of_keys
    if isinstance(first, FlatBoxObservation):
        return first.spec_of_box
    return observation_spec(first.observation_space)
