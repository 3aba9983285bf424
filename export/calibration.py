"""Observations for calibration and verification, collected by running the trained policy in its own
environment: the states the deployed policy will actually see, not samples of the observation space."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.specs import ObservationSpec
from rl2edge.train.core.evaluation import evaluate

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


def _collect(
    act: Callable[[Any], Any],
    env_id: str,
    episodes: int,
    seed: int,
    max_samples: int,
    flatten: Callable[[Any], np.ndarray],
    on_reset: Callable[[], None] | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The observations (and, for a stateful `act`, which ones start an episode)."""
    seen: list[np.ndarray] = []
    starts: list[int] = []

    def reset() -> None:
        starts.append(len(seen))
        if on_reset is not None:
            on_reset()

    evaluate(
        act,
        env_id,
        episodes,
        seed,
        on_step=lambda o: seen.append(np.array(flatten(o), np.float32)),
        on_reset=reset,
    )
    obs = np.stack(seen)
    if on_reset is not None:  # a stateful policy: whole sequences, cut at the end (never thinned)
        first = np.zeros(len(obs), bool)
        first[starts] = True
        return obs[:max_samples], first[:max_samples]
    if len(obs) > max_samples:  # evenly spaced, so every part of the episodes is represented
        obs = obs[np.linspace(0, len(obs) - 1, max_samples).round().astype(int)]
    return obs, None


def collect_rollout_data(
    act: Callable[[Any], Any],
    env_id: str,
    episodes: int,
    seed: int,
    max_calib: int,
    max_heldout: int,
    flatten: Callable[[Any], np.ndarray] = np.asarray,
    on_reset: Callable[[], None] | None = None,
) -> RolloutData:
    """`flatten`: a Dict env's observation -> the keys' concatenation (ObservationSpec.flatten), the form
    the pipeline keeps observations in. `on_reset`: a stateful policy's reset, called at each episode's
    start; the data then keeps whole episodes in order, with their starts."""
    calib_seed, heldout_seed = seed + CALIBRATION_SEED_OFFSET, seed + HELDOUT_SEED_OFFSET
    calibration, calib_starts = _collect(act, env_id, episodes, calib_seed, max_calib, flatten, on_reset)
    heldout, heldout_starts = _collect(
        act, env_id, max(2, episodes // 2), heldout_seed, max_heldout, flatten, on_reset
    )
    return RolloutData(
        calibration,
        heldout,
        {
            "source": f"rollouts of the trained policy (deterministic) in {env_id}",
            "calibration": {"episodes": episodes, "seeds_from": calib_seed, "samples": len(calibration)},
            "heldout": {
                "episodes": max(2, episodes // 2),
                "seeds_from": heldout_seed,
                "samples": len(heldout),
            },
            **(
                {"sequences": "whole episodes in order, the state carried, reset at each episode's start"}
                if on_reset
                else {}
            ),
        },
        calib_starts,
        heldout_starts,
    )


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
