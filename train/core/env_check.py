"""One env copy of a training run, checked as it answers (train.core.envs wraps every copy in it, before any
flattening, so that a Dict's keys can be named). What an env gets wrong ends `train` with one line that
names the env, the copy, the call and what was wrong, not a traceback from deep inside gymnasium:

- reset() or step() raising: the env's own error, in one line;
- step() returning 4 values: the old gym API (obs, reward, done, info);
- an observation whose shape is not the space's (per key for a Dict): both shapes;
- a NaN or inf in an observation or a reward (train.core.finite_check)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rl2edge.errors import Rl2EdgeError, TrainingError, short_repr
from rl2edge.train.core.finite_check import FIX, first_non_finite


class CheckedEnv(gym.Wrapper):
    """`index`: the copy's place in the vector env; `steps` counts its steps over every episode."""

    def __init__(self, env: gym.Env, env_id: str, index: int):
        super().__init__(env)
        self.env_id, self.index, self.steps = env_id, index, 0
        space = env.observation_space
        self._shapes: dict[str | None, tuple[int, ...]] = (
            {k: tuple(s.shape) for k, s in space.spaces.items() if s.shape is not None}
            if isinstance(space, gym.spaces.Dict)
            else {None: tuple(space.shape)}
            if isinstance(space, gym.spaces.Box)
            else {}
        )

    def _where(self, call: str) -> str:
        return f"env {self.env_id} (copy {self.index}) {call} at its step {self.steps}"

    def _call(self, call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (Rl2EdgeError, KeyboardInterrupt):
            raise
        except Exception as exc:  # the user's env: any error, said in one line with where it came from
            raise TrainingError(
                f"{self._where(call)} raised {type(exc).__name__}: {str(exc)[:200]}; fix the env "
                "(run it alone: gymnasium.utils.env_checker.check_env)"
            ) from exc

    def _check(self, obs: Any, call: str) -> None:
        for key, shape in self._shapes.items():
            value: Any = obs.get(key) if key is not None and isinstance(obs, dict) else obs
            got = np.shape(value)
            if got != shape:
                what = f"observation key {key!r}" if key is not None else "observation"
                raise TrainingError(
                    f"{self._where(call)} returned an {what} of shape {list(got)}, and its observation_space "
                    f"declares {list(shape)}: the env and its space must agree"
                )
        bad = first_non_finite(obs)
        if bad is not None:
            raise TrainingError(f"{self._where(call)} returned a non-finite observation ({bad}): {FIX}")

    def reset(self, **kwargs: Any) -> Any:
        out = self._call("reset()", self.env.reset, **kwargs)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TrainingError(
                f"{self._where('reset()')} returned {short_repr(out)}; gymnasium's reset returns (obs, info)"
            )
        self._check(out[0], "reset()")
        return out

    def step(self, action: Any) -> Any:
        out = self._call("step()", self.env.step, action)
        self.steps += 1
        if not (isinstance(out, tuple) and len(out) == 5):
            n = len(out) if isinstance(out, tuple) else 1
            old = " (the old gym API: obs, reward, done, info)" if n == 4 else ""
            raise TrainingError(
                f"{self._where('step()')} returned {n} values{old}; gymnasium's step returns 5: obs, reward, "
                "terminated, truncated, info"
            )
        obs, reward = out[0], out[1]
        self._check(obs, "step()")
        if not np.isfinite(reward):
            raise TrainingError(
                f"{self._where('step()')} returned a non-finite reward ({short_repr(reward)}): {FIX}"
            )
        return out
