"""Deterministic evaluation: N episodes with seeds S, S+1, ..., the same everywhere in the project
(periodic evaluation in training, `rl2edge evaluate` of an artifact, closed-loop checks at export)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rl2edge.train.core.envs import make_env

_logger = logging.getLogger(__name__)

UNLIMITED_EPISODE_CAP = 10_000
"""Where an episode of an env without a time limit is cut (gymnasium.make adds none to a class given as
`module:Class`), as export's rollouts are (export.tolerances.ROLLOUT_MAX_EPISODE_STEPS): a plant whose
episodes never end had hung training's evaluation with nothing printed."""

ActFn = Callable[[np.ndarray], "np.ndarray | int | float"]


@dataclass(frozen=True)
class EvalResult:
    returns: list[float]
    lengths: list[int]

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


def evaluate(
    act: ActFn,
    env_id: str,
    episodes: int,
    seed: int,
    max_steps: int | None = None,
    on_step: Callable[[np.ndarray], None] | None = None,
    on_reset: Callable[[], None] | None = None,
    more: Callable[[], bool] | None = None,
    max_episodes: int | None = None,
) -> EvalResult:
    """Run `act` (raw observation in, env action out) for `episodes` episodes; episode i uses seed+i.
    With `more`, episodes go on past `episodes` while `more()` says so, up to `max_episodes` in all (export
    collects rollouts until it has a minimum number of observations, whatever the episodes' lengths).

    `on_step` sees every raw observation (export uses it to collect calibration data); `on_reset` is called
    at each episode's start (an act function that keeps state across steps resets it there); without it,
    `act.reset()` where `act` has one (a stateful policy's evaluator), or the `reset()` of the object whose
    bound method `act` is (`runtime.Policy.predict`: a stateful artifact starts each episode afresh).
    """
    if on_reset is None:
        on_reset = getattr(act, "reset", None) or getattr(getattr(act, "__self__", None), "reset", None)
    env = make_env(env_id)
    cut_by_us = max_steps is None and (env.spec is None or env.spec.max_episode_steps is None)
    if cut_by_us:  # an env without a time limit: an episode that never ends must not hang training
        max_steps = UNLIMITED_EPISODE_CAP
    returns, lengths, warned = [], [], False
    try:
        i = 0
        while i < episodes or (more is not None and more() and (max_episodes is None or i < max_episodes)):
            obs, _ = env.reset(seed=seed + i)
            i += 1
            if on_reset is not None:
                on_reset()
            done, total, steps = False, 0.0, 0
            while not done:
                if on_step is not None:
                    on_step(obs)
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                steps += 1
                done = terminated or truncated or (max_steps is not None and steps >= max_steps)
            returns.append(total)
            lengths.append(steps)
            if cut_by_us and not (terminated or truncated) and not warned:
                warned = True
                _logger.warning(
                    "%s: an evaluation episode ran %d steps without ending, and the env has no time limit: "
                    "episodes are cut there (wrap the env in gymnasium.wrappers.TimeLimit, or register it "
                    "with max_episode_steps)",
                    env_id,
                    steps,
                )
    finally:
        env.close()
    return EvalResult(returns, lengths)
