"""Whether a quantized file keeps fp32's closed-loop return: one rule for export's warning and for
`--quantize auto`.

Both files run the same episodes (the same seeds), so the drop is the difference of their mean returns.
It is judged against the return's scale, the larger of |fp32's mean| and fp32's spread (standard
deviation) over those episodes. A share of |mean| alone blows up on a plant whose return is near zero:
a mean of 0.4 with episodes from -10 to +10 made a drop of 0.02 look like 5 %. Where the mean dominates
(CartPole's 500 +- 0, Pendulum's -150 +- 90) the scale is |mean|, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RULE = (
    "this file's mean closed-loop return >= fp32's - pct / 100 * scale, on the same seeds; "
    "scale = max(|fp32's mean|, fp32's standard deviation over the episodes)"
)


@dataclass(frozen=True)
class ReturnCheck:
    fp32_mean: float
    fp32_std: float
    mean: float
    episodes: int
    pct: float
    """The allowed drop, in % of the scale."""

    @property
    def drop(self) -> float:
        return self.fp32_mean - self.mean

    @property
    def scale(self) -> float:
        return max(abs(self.fp32_mean), self.fp32_std)

    @property
    def floor(self) -> float:
        """The lowest mean return within the allowed drop."""
        return self.fp32_mean - self.pct / 100.0 * self.scale

    @property
    def within(self) -> bool:
        return self.mean >= self.floor

    def describe(self, mode: str) -> str:
        """What was compared, for a log line: the drop, the scale it was judged against, and the limit."""
        return (
            f"{mode} returns {self.mean:.2f} against fp32's {self.fp32_mean:.2f} +- {self.fp32_std:.2f} over the "
            f"same {self.episodes} episodes: a drop of {self.drop:.2f}, {self._share():.1f}% of the return's scale "
            f"{self.scale:.2f} (the larger of |fp32's mean| and its spread); the limit is {self.pct:g}%"
        )

    def _share(self) -> float:
        if self.scale == 0:
            return 0.0 if self.drop <= 0 else float("inf")
        return 100.0 * self.drop / self.scale


def check_return(fp32: Mapping[str, Any], this: Mapping[str, Any], pct: float) -> ReturnCheck:
    """`fp32` and `this`: closed-loop results ({"mean_return", "std_return", "returns"}) on the same seeds."""
    return ReturnCheck(
        fp32_mean=float(fp32["mean_return"]),
        fp32_std=float(fp32["std_return"]),
        mean=float(this["mean_return"]),
        episodes=len(this["returns"]),
        pct=pct,
    )
