"""An off-policy agent's actor in numpy: what the off-policy driver explores with on a CPU, in either
backend.

Why not the framework: exploring is one forward pass of the actor on n_envs rows per env step, and there a
framework's per-call cost is most of the time. In a run (SAC, Pendulum-v1, 256x256 actor, one thread,
3000 env steps) an explore call took 0.26 ms in torch and 1.36 ms in TF before, 0.15 and 0.27 ms through
this (isolated, on weights already loaded: 0.03 ms), against 10-11 ms for the gradient step each env step
pays.

The weights are the framework's: torch's as views of its parameters, which its in-place updates keep
current; TF's as the values its training-phase graph returns with the stats (`invalidate`, then the next
`act` loads them). The actions differ from the framework's own forward pass in the last bits (other
matmul kernels and transcendental functions), and a squashed Gaussian's sampling noise comes from a numpy
generator seeded with the run's seed instead of the framework's. tests/test_numpy_actor.py holds both
backends' own forward passes to this one.

The agent passes how its heads' outputs become an action: a `SquashedGaussian` sample or the
deterministic `Tanh`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from rl2edge.train.core.numpy_policy import Layers


class Sampler(Protocol):
    n_heads: int
    """How many of the loaded layers are heads on the same latent (the last ones)."""

    def __call__(self, heads: list[np.ndarray]) -> np.ndarray:
        """The heads' outputs -> actions in [-1, 1]-scaled units."""
        ...


class Tanh:
    """The deterministic tanh(actor(obs)) of a tanh-ended actor (TD3, DDPG)."""

    n_heads = 1

    def __call__(self, heads: list[np.ndarray]) -> np.ndarray:
        (out,) = heads
        return np.tanh(out, out=out)


class SquashedGaussian:
    """A sample tanh(mean + exp(clip(log_std)) * noise) from the two heads (mean, log std) of a squashed
    Gaussian policy (SAC), the noise from its own numpy stream of the run's seed (the framework's stays
    the update's)."""

    n_heads = 2

    def __init__(self, seed: int, log_std_min: float, log_std_max: float):
        self.rng = np.random.Generator(np.random.PCG64([seed, 0x5AC]))
        self._bounds = (float(log_std_min), float(log_std_max))

    def __call__(self, heads: list[np.ndarray]) -> np.ndarray:
        mean, log_std = heads
        std = np.exp(np.clip(log_std, *self._bounds))
        noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        return np.tanh(mean + std * noise)


class NumpyActor:
    """An MLP actor: hidden layers with `activation`, then `sample.n_heads` linear heads on the last
    latent, whose outputs `sample` turns into actions. `load` returns the layers as (kernel [in, out], bias)
    arrays that stay valid until the next invalidate()."""

    def __init__(self, activation: str, load: Callable[[], Layers], sample: Sampler):
        if activation not in ("relu", "tanh"):
            raise ValueError(f"no numpy form of activation {activation!r}")
        self._relu, self._load, self.sample = activation == "relu", load, sample
        self._layers: Layers | None = None

    def invalidate(self) -> None:
        """The framework's weights moved (a training phase, a restored state): read them at the next act."""
        self._layers = None

    def forward(self, obs: np.ndarray) -> list[np.ndarray]:
        """The heads' outputs: [mean, log_std] before the clamp (SAC), [pre-tanh action] (TD3)."""
        if self._layers is None:
            self._layers = self._load()
        n_heads = self.sample.n_heads
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
        return self.sample(self.forward(obs))
