"""Export's rollout data: every set reaches its minimum number of observations whatever the episodes' lengths
(a weak policy is verified on as many observations as a good one), and collection is bounded."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rl2edge.export.calibration import collect_rollout_data
from rl2edge.export.tolerances import DEFAULT, ROLLOUT_MAX_EPISODES


def push_left(obs: np.ndarray) -> int:
    """A CartPole policy that always pushes one way: the pole falls within about 10 steps."""
    return 0


def test_short_episodes_still_give_the_minimum_of_observations() -> None:
    data = collect_rollout_data(push_left, "CartPole-v1", 3, 0, 1000, 2000)
    calib, heldout = data.description["calibration"], data.description["heldout"]
    assert len(data.calibration) >= DEFAULT.calibration_min_samples
    assert len(data.heldout) >= DEFAULT.heldout_min_samples
    # three episodes of ~10 steps could not have given that: more episodes were run, and recorded
    assert calib["episodes"] > 3 and heldout["episodes"] > 2
    assert calib["min_samples"] == DEFAULT.calibration_min_samples
    assert calib["samples"] == len(data.calibration) and heldout["samples"] == len(data.heldout)


def test_a_stateful_policy_gets_whole_episodes_up_to_the_minimum() -> None:
    resets: list[int] = []
    data = collect_rollout_data(
        push_left, "CartPole-v1", 2, 0, 10_000, 10_000, on_reset=lambda: resets.append(1)
    )
    assert data.calibration_starts is not None and data.heldout_starts is not None
    assert len(data.heldout) >= DEFAULT.heldout_min_samples
    assert data.heldout_starts[0] and data.heldout_starts.sum() == data.description["heldout"]["episodes"]
    # every episode's rows are whole: the set was not cut (max 10,000) and ends where an episode ends
    assert (
        len(resets) == data.description["calibration"]["episodes"] + data.description["heldout"]["episodes"]
    )


def test_collection_is_bounded_and_warns_when_the_minimum_cannot_be_reached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="rl2edge.export.calibration"):
        data = collect_rollout_data(
            push_left, "CartPole-v1", 2, 0, 100_000, 100_000, min_calib=100_000, min_heldout=10
        )
    assert data.description["calibration"]["episodes"] == ROLLOUT_MAX_EPISODES
    assert len(data.calibration) < 100_000
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "calibration" in warned[0] and "under the minimum of 100000" in warned[0]
    # the held-out set's minimum is met by its own two episodes: no more were run
    assert data.description["heldout"]["episodes"] == 2
