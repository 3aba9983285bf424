"""Training stops on non-finite data (SB3's VecCheckNan, always on): a NaN or inf in an observation or a
reward the env gives, in a loss, or in the weights about to be written ends `train` with one line that
names where it came from. The run is not written (train writes --out in one rename at the end), so what
--out held before stays.

Why always on: one NaN observation enters the running normalizer's mean and every later update; the run
then finished, printed an evaluation and wrote an all-NaN checkpoint that only failed at export."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rl2edge.errors import TrainingError

FIX = (
    "the env must give finite observations and rewards (a sensor's 'no reading' is a value the env "
    "chooses, or an episode end); training stopped and --out is as it was"
)


def _first_bad(values: Any) -> tuple[int, float] | None:
    """(flat index, value) of the first non-finite entry, or None."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "fc":  # integers and booleans are always finite
        return None
    finite = np.isfinite(arr)
    if finite.all():  # every env step of training comes here: the common case allocates nothing more
        return None
    bad = np.flatnonzero(~finite)
    return (int(bad[0]), arr.ravel()[bad[0]].item()) if bad.size else None


def first_non_finite(observation: Any) -> str | None:
    """Where an observation (an array, or a Dict's keys) first holds a NaN or inf: "key 'speed', index 0:
    nan" or "index 3: inf"; None when every value is finite."""
    parts: Iterable[tuple[str | None, Any]] = (
        observation.items() if isinstance(observation, Mapping) else [(None, observation)]
    )
    for key, values in parts:
        found = _first_bad(values)
        if found is not None:
            where = f"key {key!r}, index {found[0]}" if key is not None else f"index {found[0]}"
            return f"{where}: {found[1]}"
    return None


def check_rewards(rewards: np.ndarray, where: str) -> None:
    """Rewards computed outside env.step (HER's compute_reward on relabeled goals)."""
    found = _first_bad(rewards)
    if found is not None:
        raise TrainingError(f"{where} returned a non-finite reward ({found[1]}, entry {found[0]}): {FIX}")


def check_losses(step: int, row: Mapping[str, float]) -> None:
    """A progress row's losses: a NaN or inf loss means the weights are already lost."""
    for name, value in row.items():
        if "loss" in name and not np.isfinite(value):
            raise TrainingError(
                f"training diverged: {name} is {value} at step {step} (the learning rate, the reward "
                "scale or the gradient clip is the usual cause); training stopped and --out is as it was"
            )


def check_weights(state: Any) -> None:
    """The weights about to be written (an agent's get_state(): a dict of tensors or a list of arrays)."""
    items = state.items() if isinstance(state, Mapping) else enumerate(state)
    for name, value in items:
        if hasattr(value, "detach"):  # a torch tensor: its values without importing torch here
            value = value.detach().cpu().numpy()
        found = _first_bad(value)
        if found is not None:
            raise TrainingError(
                f"the trained weights hold {found[1]} (parameter {name!r}): the run diverged; nothing was "
                "written and --out is as it was"
            )
