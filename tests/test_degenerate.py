"""export.degenerate: a Box policy held at its bounds is saturated (warned), one held inside them is blind
(refused); a camera TD3 barely trained in TF pinned every action at -2.0, Pendulum's low bound."""

from __future__ import annotations

import numpy as np
import pytest

from rl2edge.errors import ExportError
from rl2edge.export.degenerate import check_outputs

BOUNDS = (np.array([-2.0]), np.array([2.0]))


def test_a_box_policy_at_its_bound_is_saturated_and_inside_it_blind(caplog: pytest.LogCaptureFixture) -> None:
    check_outputs(np.full((600, 1), -2.0), False, False, BOUNDS)
    assert "saturated at the action bounds" in caplog.text
    with pytest.raises(
        ExportError, match=r"actions are the same on all 600 held-out observations \(\[0.5\]\)"
    ):
        check_outputs(np.full((600, 1), 0.5), False, False, BOUNDS)
    check_outputs(np.full((600, 1), 0.5), False, True, BOUNDS)  # asked for
    check_outputs(np.linspace(-1, 1, 600)[:, None], False, False, BOUNDS)  # it moves: fine


def test_non_finite_outputs_are_refused_even_when_asked() -> None:
    logits = np.zeros((10, 2))
    logits[3, 1] = np.nan
    with pytest.raises(ExportError, match=r"logits/Q-values are not finite on 1 of 10 .* sample 3"):
        check_outputs(logits, True, True)
