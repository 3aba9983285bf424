"""The quantized file's return against fp32's (export.return_check), the one rule of export's warning and
of `--quantize auto`: judged against the return's scale, so that it stays meaningful near a zero mean."""

from __future__ import annotations

import numpy as np
import pytest

from rl2edge.export.return_check import check_return


def _closed(returns: list[float]) -> dict:
    r = np.asarray(returns, dtype=float)
    return {"mean_return": float(r.mean()), "std_return": float(r.std()), "returns": returns}


def _old_rule_keeps(fp32: dict, this: dict, pct: float) -> bool:
    """The rule this replaced: a share of |fp32's mean| alone."""
    return this["mean_return"] >= fp32["mean_return"] - abs(fp32["mean_return"]) * pct / 100


# A plant whose return is near zero with a spread of about 10 (the warehouse AGV's shape): fp32's ten
# episodes, and a quantized file that changed one episode's last step a little (lost nothing that matters).
NEAR_ZERO = [-9.1, 12.3, 0.8, -4.4, 7.9, -12.6, 3.1, 10.2, -8.7, 4.5]


def test_a_lossless_file_on_a_near_zero_mean_plant_is_kept() -> None:
    fp32 = _closed(NEAR_ZERO)
    this = _closed([*NEAR_ZERO[:-1], NEAR_ZERO[-1] - 0.3])
    assert abs(fp32["mean_return"]) < 0.5 and fp32["std_return"] > 7
    assert not _old_rule_keeps(fp32, this, 5.0)  # the old rule refused it: 0.03 is > 5% of |0.39|
    check = check_return(fp32, this, 5.0)
    assert check.within and check.scale == pytest.approx(fp32["std_return"])
    assert "scale" in check.describe("int8") and "same 10 episodes" in check.describe("int8")


def test_a_real_loss_on_a_near_zero_mean_plant_is_caught() -> None:
    fp32 = _closed(NEAR_ZERO)
    this = _closed([r - 3.0 for r in NEAR_ZERO])  # every episode 3 worse: 36% of the spread
    check = check_return(fp32, this, 5.0)
    assert not check.within and check.drop == pytest.approx(3.0)
    assert "36." in check.describe("int8")


@pytest.mark.parametrize(
    "fp32, this, keeps",
    [
        ([500.0] * 10, [500.0] * 9 + [480.0], True),  # CartPole: 2 of 500 lost, 0.4% < 1%
        ([500.0] * 10, [500.0] * 8 + [450.0, 440.0], False),  # 11 of 500, 2.2%
        ([-150.0, -120.0, -300.0, -130.0], [-151.0, -121.0, -301.0, -131.0], True),  # Pendulum-like, 1 of 175
        ([-150.0, -120.0, -300.0, -130.0], [-160.0, -130.0, -310.0, -140.0], False),  # 10 of 175
        ([0.0] * 5, [0.0] * 5, True),  # no return and no spread: only an exact tie passes
        ([0.0] * 5, [-1e-3] + [0.0] * 4, False),
    ],
)
def test_where_the_mean_dominates_the_rule_is_the_old_one(fp32: list, this: list, keeps: bool) -> None:
    a, b = _closed(fp32), _closed(this)
    assert check_return(a, b, 1.0).within is keeps
    if abs(a["mean_return"]) >= a["std_return"]:
        assert _old_rule_keeps(a, b, 1.0) is keeps


def test_a_better_file_is_always_kept() -> None:
    fp32 = _closed(NEAR_ZERO)
    assert check_return(fp32, _closed([r + 1 for r in NEAR_ZERO]), 0.0).within
