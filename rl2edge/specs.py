"""The shared types of every package, numpy only: what a policy's observation and action are (as the
checkpoint and the manifest write them), the action transform between the network and the env, and the
exploration-noise spec with its parser. train, export, runtime and plc_bridge speak through these.

Two sizes of an action are easy to confuse and have two names here: `ActionSpec.size` is the action's
length as the env and the PLC take it (1 for a Discrete index), `ActionSpec.output_width` the width of
the network's output (n logits or Q-values for Discrete). The checkpoint's `network.act_dim` is the
latter, a file-format name that stays.

Action transform. Box: env_action = center + clip(a, -1, 1) * half_range, in float32. Discrete:
env_action = index + start. One formula, used in training, evaluation, and (as constants folded into
the graph) deployment.

Exploration noise, in [-1, 1]-scaled action units, with eps ~ N(0, 1):

    gaussian:  a = clip(mu + sigma * eps, -1, 1)
    ou:        x' = x - theta * x * dt + sigma * sqrt(dt) * eps;  a = clip(mu + x', -1, 1)
    policy:    a = the policy's own distribution (SAC: tanh(mean + std * eps); PPO: mean + std * eps)

written as on the command line: `gaussian:sigma=0.1`, `ou:theta=0.15,sigma=0.2,dt=0.01`, `policy`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError


@dataclass(frozen=True)
class ObservationSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: tuple[float | None, ...] = ()
    high: tuple[float | None, ...] = ()
    layout: str = "flat"
    """flat, HWC or CHW (image observations)."""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ObservationSpec:
        return cls(
            tuple(int(x) for x in d["shape"]),
            str(d.get("dtype", "float32")),
            tuple(d.get("low") or ()),
            tuple(d.get("high") or ()),
            str(d.get("layout", "flat")),
        )

    def to_json(self) -> dict[str, Any]:
        """As checkpoint.json and the manifest have always written it."""
        return {
            "type": "box",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": list(self.low),
            "high": list(self.high),
            "layout": self.layout,
        }

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def bounds(self) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
        """(low, high) with one entry per value; None where a side is unbounded (a bound left out, or [])."""
        unbounded = (None,) * self.size
        return self.low or unbounded, self.high or unbounded


@dataclass(frozen=True)
class ActionSpec:
    kind: str
    """discrete or box"""
    n: int = 0
    start: int = 0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ActionSpec:
        if d["type"] == "discrete":
            return cls("discrete", n=int(d["n"]), start=int(d.get("start", 0)))
        return cls(
            "box",
            shape=tuple(int(x) for x in d.get("shape", [len(d["low"])])),
            dtype=str(d.get("dtype", "float32")),
            low=tuple(d["low"]),
            high=tuple(d["high"]),
        )

    def to_json(self) -> dict[str, Any]:
        if self.discrete:
            return {"type": "discrete", "n": self.n, "start": self.start}
        return {
            "type": "box",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": list(self.low),
            "high": list(self.high),
        }

    @property
    def discrete(self) -> bool:
        return self.kind == "discrete"

    @property
    def size(self) -> int:
        """The action's length as the env and the PLC take it: 1 for a Discrete index."""
        return 1 if self.discrete else int(np.prod(self.shape))

    @property
    def index_range(self) -> tuple[int, int]:
        """Discrete: the first and the last action index the env takes (start .. start + n - 1)."""
        return self.start, self.start + self.n - 1

    @property
    def output_width(self) -> int:
        """The network's output width: n logits or Q-values for Discrete, one per dimension for Box."""
        return self.n if self.discrete else self.size


def is_discrete(spec: dict[str, Any] | ActionSpec) -> bool:
    """For the JSON dicts of checkpoint.json and the manifest as for ActionSpec."""
    return spec.discrete if isinstance(spec, ActionSpec) else spec["type"] == "discrete"


class ActionTransform:
    def __init__(self, spec: dict[str, Any] | ActionSpec):
        spec = spec if isinstance(spec, ActionSpec) else ActionSpec.from_json(spec)
        self.discrete = spec.discrete
        if self.discrete:
            self.start = spec.start
        else:
            low = np.asarray(spec.low, np.float64)
            high = np.asarray(spec.high, np.float64)
            self.center = ((high + low) / 2).astype(np.float32)
            self.half_range = ((high - low) / 2).astype(np.float32)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        if self.discrete:
            return np.asarray(action, np.int64) + self.start
        a = np.clip(np.asarray(action, np.float32), np.float32(-1), np.float32(1))
        return (self.center + a * self.half_range).astype(np.float32)


KINDS = ("gaussian", "ou", "policy")
_PARAMS = {"gaussian": {"sigma": 0.1}, "ou": {"theta": 0.15, "sigma": 0.2, "dt": 1e-2}, "policy": {}}


@dataclass(frozen=True)
class NoiseSpec:
    kind: str
    sigma: float = 0.0
    theta: float = 0.0
    dt: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return {k: v for k, v in out.items() if k == "kind" or k in _PARAMS[self.kind]}

    def __str__(self) -> str:
        params = ",".join(f"{k}={getattr(self, k):g}" for k in _PARAMS[self.kind])
        return f"{self.kind}:{params}" if params else self.kind


def parse_noise(text: str) -> NoiseSpec:
    """'gaussian:sigma=0.1' -> NoiseSpec; a clear ConfigError for anything else."""
    kind, _, rest = text.strip().partition(":")
    if kind not in KINDS:
        raise ConfigError(
            f"--noise {text!r}: unknown kind {kind!r}; use gaussian:sigma=S, ou:theta=T,sigma=S[,dt=D] or policy"
        )
    params = dict(_PARAMS[kind])
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise ConfigError(
                f"--noise {text!r}: {kind} takes {', '.join(params) or 'no parameters'}, got {item!r}"
            )
        try:
            params[key] = float(value)
        except ValueError:
            raise ConfigError(f"--noise {text!r}: {key} must be a number, got {value!r}") from None
        if not math.isfinite(params[key]) or params[key] < 0:
            raise ConfigError(f"--noise {text!r}: {key} must be a finite number >= 0")
    if kind == "ou" and params["theta"] * params["dt"] >= 2:
        raise ConfigError(f"--noise {text!r}: theta * dt must be below 2, or the OU process diverges")
    return NoiseSpec(kind, **params)


def ou_constants(theta: float, sigma: float, dt: float) -> tuple[np.float32, np.float32]:
    """(theta * dt, sigma * sqrt(dt)) as the float32 constants of the step below, here and in the graph."""
    return np.float32(theta * dt), np.float32(sigma * math.sqrt(dt))


def ou_step(x: np.ndarray, eps: np.ndarray, theta: float, sigma: float, dt: float) -> np.ndarray:
    """One OU step in float32: x - (theta dt) x + (sigma sqrt(dt)) eps, the graph's formula."""
    decay, scale = ou_constants(theta, sigma, dt)
    return (x - decay * x + scale * eps).astype(np.float32)
