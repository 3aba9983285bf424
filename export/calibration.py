"""Observations for calibration and verification, collected by running the trained policy in its own
environment: the states the deployed policy will actually see, not samples of the observation space."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.export.tolerances import DEFAULT, ROLLOUT_MAX_EPISODE_STEPS, ROLLOUT_MAX_EPISODES
from rl2edge.specs import ObservationSpec
from rl2edge.train.core.evaluation import evaluate

_logger = logging.getLogger(__name__)

CALIBRATION_SEED_OFFSET = 1_000
HELDOUT_SEED_OFFSET = 2_000


@dataclass(frozen=True)
class RolloutData:
    calibration: np.ndarray
    heldout: np.ndarray
    description: dict[str, Any]
    calibration_starts: np.ndarray | None = None
    """Stateful sources: bool per calibration row, True at an episode's first observation (the rows are
    whole episodes in order, so the state can be carried through them)."""
    heldout_starts: np.ndarray | None = None


@dataclass(frozen=True)
class _Rollouts:
    obs: np.ndarray
    starts: np.ndarray | None
    episodes: int
    min_samples: int

    def describe(self, seed: int) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "seeds_from": seed,
            "samples": len(self.obs),
            "min_samples": self.min_samples,
        }


def _collect(
    act: Callable[[Any], Any],
    env_id: str,
    episodes: int,
    seed: int,
    samples: tuple[int, int],
    flatten: Callable[[Any], np.ndarray],
    on_reset: Callable[[], None] | None,
    what: str,
) -> _Rollouts:
    """At least `episodes` episodes, and more until `samples`' minimum is reached (within the bounds of
    export.tolerances); the observations (and, for a stateful `act`, which ones start an episode)."""
    min_samples, max_samples = samples
    seen: list[np.ndarray] = []
    starts: list[int] = []

    def reset() -> None:
        starts.append(len(seen))
        if on_reset is not None:
            on_reset()

    result = evaluate(
        act,
        env_id,
        episodes,
        seed,
        max_steps=ROLLOUT_MAX_EPISODE_STEPS,
        on_step=lambda o: seen.append(np.array(flatten(o), np.float32)),
        on_reset=reset,
        more=lambda: len(seen) < min_samples,
        max_episodes=ROLLOUT_MAX_EPISODES,
    )
    if len(seen) < min_samples:
        _logger.warning(
            "%s: %d observations from %d episodes of %s, under the minimum of %d: the episodes are too short "
            "(%.1f steps on average); the check rests on fewer observations than it should",
            what,
            len(seen),
            len(result.lengths),
            env_id,
            min_samples,
            len(seen) / max(1, len(result.lengths)),
        )
    obs = np.stack(seen)
    if on_reset is not None:  # a stateful policy: whole sequences, cut at the end (never thinned)
        first = np.zeros(len(obs), bool)
        first[starts] = True
        return _Rollouts(obs[:max_samples], first[:max_samples], len(result.lengths), min_samples)
    if len(obs) > max_samples:  # evenly spaced, so every part of the episodes is represented
        obs = obs[np.linspace(0, len(obs) - 1, max_samples).round().astype(int)]
    return _Rollouts(obs, None, len(result.lengths), min_samples)


def collect_rollout_data(
    act: Callable[[Any], Any],
    env_id: str,
    episodes: int,
    seed: int,
    max_calib: int,
    max_heldout: int,
    flatten: Callable[[Any], np.ndarray] = np.asarray,
    on_reset: Callable[[], None] | None = None,
    min_calib: int = DEFAULT.calibration_min_samples,
    min_heldout: int = DEFAULT.heldout_min_samples,
) -> RolloutData:
    """`episodes` episodes for calibration, half as many for the held-out set, each set extended by more
    episodes until it holds its minimum number of observations (`min_calib`, `min_heldout`).

    `flatten`: a Dict env's observation -> the keys' concatenation (ObservationSpec.flatten), the form
    the pipeline keeps observations in. `on_reset`: a stateful policy's reset, called at each episode's
    start; the data then keeps whole episodes in order, with their starts."""
    calib_seed, heldout_seed = seed + CALIBRATION_SEED_OFFSET, seed + HELDOUT_SEED_OFFSET
    calibration = _collect(
        act, env_id, episodes, calib_seed, (min_calib, max_calib), flatten, on_reset, "calibration"
    )
    heldout = _collect(
        act,
        env_id,
        max(2, episodes // 2),
        heldout_seed,
        (min_heldout, max_heldout),
        flatten,
        on_reset,
        "verification",
    )
    return RolloutData(
        calibration.obs,
        heldout.obs,
        {
            "source": f"rollouts of the trained policy (deterministic) in {env_id}",
            "calibration": calibration.describe(calib_seed),
            "heldout": heldout.describe(heldout_seed),
            **(
                {"sequences": "whole episodes in order, the state carried, reset at each episode's start"}
                if on_reset
                else {}
            ),
        },
        calibration.starts,
        heldout.starts,
    )


STAT_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
STAT_MAX_DIMS = 1024
"""Observations wider than this (camera frames) get no per-dimension statistics: 12 figures per pixel would
swell the manifest to megabytes, and a pixel's drift says little."""


def observation_stats(rows: np.ndarray, source: str) -> dict[str, Any] | None:
    """The manifest's `observation_stats`: per flat dimension of the calibration observations, what serve's
    drift monitor and replay compare the plant with (plc_bridge.drift): range, mean, std and quantiles.
    None for observations wider than STAT_MAX_DIMS."""
    x = np.asarray(rows, np.float64).reshape(len(rows), -1)
    if x.shape[1] > STAT_MAX_DIMS or len(x) == 0:
        return None
    return {
        "source": source,
        "samples": len(x),
        "min": x.min(axis=0).tolist(),
        "max": x.max(axis=0).tolist(),
        "mean": x.mean(axis=0).tolist(),
        "std": x.std(axis=0).tolist(),
        "quantiles": {f"{q:g}": np.quantile(x, q, axis=0).tolist() for q in STAT_QUANTILES},
    }


def pin_uint8_range(calibration: np.ndarray, observation: ObservationSpec) -> np.ndarray:
    """uint8 frames of a [0, 255] space: one pixel at 0 and one at 255 in the calibration set, so that the
    int8 input's range is the space's whole range: scale 1 and zero point -128, whatever the frames seen.
    The runtime then hands a frame to the model as its bits shifted by 128, with no float round trip
    (runtime.policy); two pixels out of the set leave every later tensor's range as it was."""
    low, high = observation.low, observation.high
    if observation.dtype != "uint8" or len(calibration) == 0 or None in low or None in high:
        return calibration
    if not low or not high or np.min(np.asarray(low)) != 0 or np.max(np.asarray(high)) != 255:
        return calibration
    pinned = calibration.copy()
    pinned[0].reshape(-1)[0] = 0
    pinned[-1].reshape(-1)[-1] = 255
    return pinned
