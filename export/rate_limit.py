"""Action-rate limits folded into the graph: each component of a Box action may change by at most
`max_rate * period` from the action the graph returned on the previous call.

The previous action is a state tensor of the artifact (export.graph_spec's contract): the graph takes it as
the input `prev_action` and returns the next one as `prev_action_out`, and `episode_start` zeroes it. On an
episode's first call the action is the policy's own (within float32 rounding): there is no previous action
to limit from. Evaluate and serve run the same graph, so the closed loop on the PLC equals `rl2edge
evaluate`.

    prev    = prev_action * (1 - episode_start)
    limited = prev + min(max(policy_action - prev, -max_step), max_step)
    action  = limited + episode_start * (policy_action - limited);  prev_action_out = action

With the policy's action inside its bounds and the previous one too, the limited action lies between
them, so inside the bounds as well. All of it is elementwise float32 arithmetic (SUB, ADD, MUL, MINIMUM,
MAXIMUM) on small constants, which int8 export keeps float32 (export.tflite_convert.FLOAT_OPS) and fp16
export stores as float16: `max_step` is rounded down to a float16 value, so that it holds in every mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError

PREV_ACTION = "prev_action"
RATE_LIMIT_CELL = (
    "action-rate limit: prev = prev_action * (1 - episode_start); "
    "limited = prev + min(max(policy_action - prev, -max_step), max_step); "
    "action = limited + episode_start * (policy_action - limited); prev_action_out = action "
    "(max_step: max_rate * period rounded down to a float16 value, per component, in action units; an "
    "episode's first action is the policy's own)"
)


@dataclass(frozen=True)
class RateLimit:
    """At most `max_rate[i]` action units per second for component i, at a control period of `period_ms`."""

    max_rate: tuple[float, ...]
    period_ms: float

    def max_step(self, act_dim: int) -> np.ndarray:
        """The largest change per call, per component, as the graph's float32 constant [1, act_dim]: the
        largest float16 value at most max_rate * period, so that an fp16 file's constant is the same."""
        rate = self.max_rate * act_dim if len(self.max_rate) == 1 else self.max_rate
        if len(rate) != act_dim:
            raise ConfigError(
                f"--max-action-rate gives {len(self.max_rate)} rates for an action of {act_dim} components; "
                f"give one rate for all, or one per component"
            )
        exact = np.asarray(rate, np.float64) * self.period_ms / 1e3
        half = exact.astype(np.float16)
        over = half.astype(np.float64) > exact  # rounded up (or to inf): one float16 step down
        half[over] = np.nextafter(half[over], np.float16(0))
        if not (half > 0).all():
            raise ConfigError(
                f"--max-action-rate {','.join(f'{r:g}' for r in self.max_rate)} at --period-ms "
                f"{self.period_ms:g} allows a change per call below 6e-8 action units; the limit would hold "
                "the action still"
            )
        return half.astype(np.float32).reshape(1, act_dim)

    def to_json(self, act_dim: int) -> dict[str, Any]:
        """The manifest's `folded.action_rate` section."""
        return {
            "max_rate": list(self.max_rate),
            "period_ms": self.period_ms,
            "max_step": self.max_step(act_dim).reshape(-1).tolist(),
            "state": PREV_ACTION,
            "formula": RATE_LIMIT_CELL,
        }


def parse_rate_limit(rates: str, period_ms: float | None) -> RateLimit:
    """`--max-action-rate 0.5` or `0.5,2.0` (action units per second) at `--period-ms`; a clear ConfigError
    for anything else."""
    if period_ms is None:
        raise ConfigError(
            "--max-action-rate needs --period-ms, the control period the rate is stated at (the plant's step "
            "period, which serve's --period-ms should match)"
        )
    if not (math.isfinite(period_ms) and 0 < period_ms <= 60_000):
        raise ConfigError(f"--period-ms {period_ms:g}: choose a period above 0 and up to 60000 ms")
    values = []
    for item in (p.strip() for p in rates.split(",")):
        try:
            value = float(item)
        except ValueError:
            raise ConfigError(
                f"--max-action-rate {rates!r}: {item!r} is not a number; give action units per second, one for "
                "all components or one per component (0.5 or 0.5,2.0)"
            ) from None
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(
                f"--max-action-rate {rates!r}: every rate must be a finite number > 0, got {item}"
            )
        values.append(value)
    return RateLimit(tuple(values), float(period_ms))


def limit_step(action: np.ndarray, prev: np.ndarray, start: float, max_step: np.ndarray) -> np.ndarray:
    """One call of the graph's limit in numpy float32, op for op as the graph computes it."""
    episode_start = np.float32(start)
    prev = np.asarray(prev, np.float32) * (np.float32(1.0) - episode_start)
    action = np.asarray(action, np.float32).reshape(prev.shape)
    limited = prev + np.minimum(np.maximum(action - prev, -max_step), max_step)
    return limited + episode_start * (action - limited)


def limit_sequence(actions: np.ndarray, starts: np.ndarray, max_step: np.ndarray) -> np.ndarray:
    """Whole episodes in order: each action limited from the previous limited one, reset where `starts`."""
    prev = np.zeros_like(max_step)
    out = []
    for a, start in zip(np.asarray(actions, np.float32), starts, strict=True):
        prev = limit_step(a[None], prev, float(start), max_step)
        out.append(prev[0])
    return np.stack(out)


def torch_rate_limited(inner: Any, max_step: np.ndarray, stateful: bool) -> Any:
    """`inner` (obs -> action, or obs, episode_start, *states -> action, *next states) with the limit after
    it: obs, episode_start, *states, prev_action -> action, *next states, prev_action_out."""
    import torch
    from torch import nn

    class RateLimited(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.register_buffer("max_step", torch.as_tensor(max_step))

        def forward(self, obs: torch.Tensor, episode_start: torch.Tensor, *states: torch.Tensor) -> Any:
            if stateful:
                action, *new = self.inner(obs, episode_start, *states[:-1])
            else:
                action, new = self.inner(obs), []
            prev = states[-1] * (1.0 - episode_start)
            limited = prev + torch.minimum(torch.maximum(action - prev, -self.max_step), self.max_step)
            out = limited + episode_start * (action - limited)
            return (out, *new, out)

    return RateLimited().eval()


def tf_rate_limited(serve: Any, max_step: np.ndarray, stateful: bool) -> Any:
    """The TF route's serving function with the limit after it: `serve`'s inputs (adding `episode_start`
    after them for a stateless one) and `prev_action`; its outputs and `prev_action_out`."""
    import tensorflow as tf

    from rl2edge.export.graph_spec import EPISODE_START

    signature = list(serve.input_signature)
    if not stateful:
        signature.append(tf.TensorSpec([1, 1], tf.float32, name=EPISODE_START))
    at = [s.name for s in signature].index(EPISODE_START)
    signature.append(tf.TensorSpec([1, max_step.shape[1]], tf.float32, name=PREV_ACTION))
    n_inner = len(serve.input_signature)

    def limited(*args: Any) -> dict[str, Any]:
        out = dict(serve(*args[:n_inner]))
        episode_start, prev = args[at], args[-1] * (1.0 - args[at])
        policy_action, step = out["action"], tf.constant(max_step)
        limited = prev + tf.minimum(tf.maximum(policy_action - prev, -step), step)
        action = limited + episode_start * (policy_action - limited)
        return {**out, "action": action, f"{PREV_ACTION}_out": tf.identity(action)}

    return tf.function(limited, input_signature=signature)
