"""Faults injected on purpose, to see what a fault response costs on a plant before commissioning:
`rl2edge evaluate --inject-faults deadline_miss:0.05` (the plant's own clock, in process) and
`rl2edge serve --inject-faults ...` (over OPC UA, with plc-sim's `--trace` as the PLC's record). Each cycle
draws at most one fault class, at its rate, from a seeded generator; the map's response
(plc_bridge.fault_response) decides what goes out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.fault_response import FAULT_CLASSES, HELD, RAMPING, FaultResponder
from rl2edge.plc_bridge.status import CycleStatus

INJECTABLE = ("deadline_miss", "invalid", "stale", "inference_error")


@dataclass(frozen=True)
class FaultInjection:
    rates: tuple[tuple[str, float], ...]
    """(fault class, probability per cycle), the classes' sum at most 1."""
    seed: int = 0


def parse_injection(text: str, seed: int = 0) -> FaultInjection:
    """`deadline_miss:0.05` or `deadline_miss:0.01,invalid:0.01`."""
    rates = []
    for part in text.split(","):
        name, _, rate = part.strip().partition(":")
        try:
            p = float(rate)
        except ValueError:
            p = -1.0
        if name not in INJECTABLE or not 0 <= p <= 1:
            raise ConfigError(
                f"--inject-faults {text!r}: give CLASS:RATE pairs, e.g. deadline_miss:0.05,invalid:0.01 "
                f"(classes: {', '.join(INJECTABLE)}; rates from 0 to 1 per cycle)"
            )
        rates.append((name, p))
    if sum(p for _, p in rates) > 1:
        raise ConfigError(f"--inject-faults {text!r}: the rates add up to more than 1 per cycle")
    return FaultInjection(tuple(rates), seed)


class FaultInjector:
    def __init__(self, injection: FaultInjection):
        self.rng = np.random.default_rng(injection.seed)
        self.bounds = np.cumsum([p for _, p in injection.rates])
        self.statuses = [FAULT_CLASSES[name] for name, _ in injection.rates]
        self.injected = 0

    def draw(self) -> CycleStatus | None:
        """This cycle's injected fault, or None."""
        i = int(np.searchsorted(self.bounds, self.rng.random(), side="right"))
        if i >= len(self.statuses):
            return None
        self.injected += 1
        return self.statuses[i]


class InjectedFaults:
    """An act function (observation -> env action) with faults injected and the responses applied on the
    plant's clock (`period_s` per step), as serve's loop applies them; `reset` at each episode start."""

    def __init__(
        self, act: Callable[[Any], Any], responder: FaultResponder, injector: FaultInjector, period_s: float
    ):
        self.act, self.responder, self.injector, self.period_s = act, responder, injector, period_s
        self.steps = self.held = self.ramped = 0

    def reset(self) -> None:
        self.responder.forget()

    def __call__(self, obs: Any) -> Any:
        action = self.act(obs)
        now = self.steps * self.period_s
        self.steps += 1
        fault = self.injector.draw()
        out, code = self.responder.respond(
            fault or CycleStatus.OK, np.atleast_1d(np.asarray(action, np.float64)).tolist(), now
        )
        self.held += bool(code & HELD)
        self.ramped += bool(code & RAMPING)
        if self.responder.discrete:  # integer actions: an index, or one per component
            return round(out[0]) if np.ndim(action) == 0 else np.rint(out).astype(np.asarray(action).dtype)
        return np.asarray(out, np.asarray(action).dtype)

    def counts(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "injected": self.injector.injected,
            "held": self.held,
            "ramped": self.ramped,
        }
