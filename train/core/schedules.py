"""Hyperparameter schedules in the RL Baselines3 Zoo notation: a number, or 'lin_<start>'."""

from __future__ import annotations

from dataclasses import dataclass

from rl2edge.errors import ConfigError


@dataclass(frozen=True)
class Schedule:
    """Value as a function of progress remaining (1 at the start of training, 0 at the end)."""

    start: float
    linear: bool = False

    def __call__(self, progress_remaining: float) -> float:
        return self.start * progress_remaining if self.linear else self.start

    @classmethod
    def parse(cls, value: float | int | str, name: str) -> Schedule:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected a number or 'lin_<number>', got {value!r}")
        if isinstance(value, int | float):
            return cls(float(value))
        text = str(value).strip()
        linear = text.startswith("lin_")
        try:
            start = float(text[4:] if linear else text)
        except ValueError:
            raise ConfigError(f"{name}: expected a number or 'lin_<number>', got {value!r}") from None
        return cls(start, linear)

    def to_json(self) -> float | str:
        return f"lin_{self.start!r}" if self.linear else self.start
