"""SAC's and TD3/DDPG's actors in numpy: what the off-policy driver explores with on a CPU, in either
backend.

Why not the framework: exploring is one forward pass of the actor on n_envs rows per env step, and there a
framework's per-call cost is most of the time. In a run (SAC, Pendulum-v1, 256x256 actor, one thread,
3000 env steps) an explore call took 0.26 ms in torch and 1.36 ms in TF before, 0.15 and 0.27 ms through
this (isolated, on weights already loaded: 0.03 ms), against 10-11 ms for the gradient step each env step
pays.

The weights are the framework's: torch's as views of its parameters, which its in-place updates keep
current; TF's as the values its training-phase graph returns with the stats (`invalidate`, then the next
`act` loads them). The actions differ from the framework's own forward pass in the last bits (other
matmul kernels and transcendental functions), and SAC's sampling noise comes from a numpy generator seeded
with the run's seed instead of the framework's. tests/test_numpy_actor.py holds both backends' own
forward passes to this one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rl2edge.train.core.numpy_policy import Layers


class NumpyActor:
    """`kind` "sac": the squashed Gaussian sample tanh(mean + exp(log_std) * noise), the last two of the
    loaded layers being the mean and log-std heads on the same latent; "td3": the deterministic
    tanh(actor(obs)). Both in [-1, 1]-scaled units. `spec` is the checkpoint's network spec (activation,
    and SAC's log-std clamp); `load` returns the layers as (kernel [in, out], bias) arrays that stay valid
    until the next invalidate()."""

    def __init__(self, kind: str, spec: dict[str, Any], load: Callable[[], Layers], seed: int):
        activation = spec["activation"]
        if kind not in ("sac", "td3"):
            raise ValueError(f"no numpy actor for {kind!r}: sac or td3")
        if activation not in ("relu", "tanh"):
            raise ValueError(f"no numpy form of activation {activation!r}")
        self.kind, self._relu, self._load = kind, activation == "relu", load
        self._bounds = (float(spec.get("log_std_min", -20.0)), float(spec.get("log_std_max", 2.0)))
        # SAC's exploration noise: its own stream from the run's seed (the framework's stays the update's)
        self.rng = np.random.Generator(np.random.PCG64([seed, 0x5AC]))
        self._layers: Layers | None = None

    def invalidate(self) -> None:
        """The framework's weights moved (a training phase, a restored state): read them at the next act."""
        self._layers = None

    def forward(self, obs: np.ndarray) -> list[np.ndarray]:
        """The heads' outputs: [mean, log_std] before the clamp (SAC), [pre-tanh action] (TD3)."""
        if self._layers is None:
            self._layers = self._load()
        n_heads = 2 if self.kind == "sac" else 1
        x = np.asarray(obs, np.float32)
        for kernel, bias in self._layers[:-n_heads]:
            x = x @ kernel
            x += bias
            if self._relu:
                np.maximum(x, 0.0, out=x)
            else:
                np.tanh(x, out=x)
        return [x @ kernel + bias for kernel, bias in self._layers[-n_heads:]]

    def act(self, obs: np.ndarray) -> np.ndarray:
        if self.kind == "td3":
            (out,) = self.forward(obs)
            return np.tanh(out, out=out)
        mean, log_std = self.forward(obs)
        std = np.exp(np.clip(log_std, *self._bounds))
        noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        return np.tanh(mean + std * noise)
