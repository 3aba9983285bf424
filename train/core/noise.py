"""Exploration noise, in [-1, 1]-scaled action units: the one definition of each process, used by the
training driver (TD3/DDPG exploration) and, as the same formulas with the same constants, by the
exported graph when noise is folded in (export.noise).

    gaussian:  a = clip(mu + sigma * eps, -1, 1)
    ou:        x' = x - theta * x * dt + sigma * sqrt(dt) * eps;  a = clip(mu + x', -1, 1)
    policy:    a = the policy's own distribution (SAC: tanh(mean + std * eps); PPO: mean + std * eps)

with eps ~ N(0, 1). The specs are written as on the command line: `gaussian:sigma=0.1`,
`ou:theta=0.15,sigma=0.2,dt=0.01`, `policy`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError

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


class GaussianNoise:
    def __init__(self, sigma: float, act_dim: int, n_envs: int, rng: np.random.Generator):
        self.sigma, self.shape, self.rng = np.float32(sigma), (n_envs, act_dim), rng

    def __call__(self) -> np.ndarray:
        return self.sigma * self.rng.standard_normal(self.shape, dtype=np.float32)

    def reset(self, env_index: int) -> None:
        pass


class OUNoise:
    """SB3's OrnsteinUhlenbeckActionNoise (mean 0), one process per env, reset at episode ends."""

    def __init__(
        self, theta: float, sigma: float, dt: float, act_dim: int, n_envs: int, rng: np.random.Generator
    ):
        self.theta, self.sigma, self.dt = np.float32(theta), np.float32(sigma), np.float32(dt)
        self.rng, self.x = rng, np.zeros((n_envs, act_dim), np.float32)

    def __call__(self) -> np.ndarray:
        eps = self.rng.standard_normal(self.x.shape, dtype=np.float32)
        self.x = ou_step(self.x, eps, self.theta, self.sigma, self.dt)
        return self.x

    def reset(self, env_index: int) -> None:
        self.x[env_index] = 0.0


def ou_constants(theta: float, sigma: float, dt: float) -> tuple[np.float32, np.float32]:
    """(theta * dt, sigma * sqrt(dt)) as the float32 constants of the step below, here and in the graph."""
    return np.float32(theta * dt), np.float32(sigma * math.sqrt(dt))


def ou_step(x: np.ndarray, eps: np.ndarray, theta: float, sigma: float, dt: float) -> np.ndarray:
    """One OU step in float32: x - (theta dt) x + (sigma sqrt(dt)) eps, the graph's formula."""
    decay, scale = ou_constants(theta, sigma, dt)
    return (x - decay * x + scale * eps).astype(np.float32)
