"""A source whose outputs are non-finite, or do not depend on the observation, is refused before anything is
converted: its files would verify (an argmax of NaN logits is 0 in the source and in every file, "agree
100 %") and then act blind on the plant.

What is checked is the source's raw output on the held-out observations: a categorical policy's logits or
Q-values (a barely trained net still moves them with its input, even where its argmax does not change),
a Box policy's actions."""

from __future__ import annotations

import logging

import numpy as np

from rl2edge.errors import ExportError

ALLOW_FLAG = "--allow-constant-output"
_logger = logging.getLogger(__name__)


def check_outputs(
    outputs: np.ndarray,
    categorical: bool,
    allow_constant: bool,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """`outputs`: [samples, ...] of the source on the held-out observations; `bounds`: a Box action's low and
    high. A Box policy held at its bounds on every observation is saturated (a barely trained actor's tanh
    pinned, or a bang-bang policy), not blind: a warning, not a refusal."""
    what = "logits/Q-values" if categorical else "actions"
    flat = np.asarray(outputs, np.float64).reshape(len(outputs), -1)
    bad_rows = ~np.isfinite(flat).all(axis=1)
    if bad_rows.any():
        first = int(np.flatnonzero(bad_rows)[0])
        raise ExportError(
            f"the source policy's {what} are not finite on {int(bad_rows.sum())} of {len(flat)} held-out "
            f"observations (the first, sample {first}: {flat[first].tolist()[:8]}); its weights or its "
            "normalization statistics hold NaN or inf (a diverged run, a variance of 0): nothing was written"
        )
    if len(flat) > 1 and not allow_constant and np.ptp(flat, axis=0).max() == 0.0:
        if bounds is not None and _at_bounds(flat[0], bounds):
            _logger.warning(
                "the source policy's actions are %s on all %d held-out observations: saturated at the action "
                "bounds (a barely trained actor, or a bang-bang policy); exported as it is",
                flat[0].tolist()[:8],
                len(flat),
            )
            return
        raise ExportError(
            f"the source policy's {what} are the same on all {len(flat)} held-out observations "
            f"({flat[0].tolist()[:8]}): it ignores what it observes (an observation clipped to one value, "
            f"zeroed weights, a dead layer); nothing was written ({ALLOW_FLAG} exports it anyway, e.g. a "
            "constant test policy)"
        )


def _at_bounds(action: np.ndarray, bounds: tuple[np.ndarray, np.ndarray]) -> bool:
    low, high = (np.asarray(b, np.float64).reshape(-1) for b in bounds)
    if low.size != action.size or high.size != action.size:
        return False
    return bool(
        np.all(np.isclose(action, low, rtol=0, atol=1e-6) | np.isclose(action, high, rtol=0, atol=1e-6))
    )
