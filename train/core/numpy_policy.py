"""The rollout's actor-critic in numpy: what PPO and A2C act with while collecting, in either backend.

Why not the framework: a rollout step is one forward pass of two small MLPs on n_envs rows, where a
framework's per-call cost is most of the time (`benchmarks/train_throughput.py --profile` shows this
module's share). The weights are read from the agent once per rollout (`RolloutWeights`), so the rollout
needs no framework: a Ray rollout worker runs this too.

The numbers differ from the framework's own forward pass in the last bits (different matmul kernels and
transcendental functions): the log-probs recorded here and the update's recomputed ones agree to about
1e-6, so the first epoch's importance ratio is 1 within that, not exactly (SB3 records them with the same
torch graph it trains with). tests/test_numpy_policy.py holds both backends' `act` to this one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_encoder import EncoderWeights, NumpyEncoder

LOG_2PI = math.log(2.0 * math.pi)

# kernel [in, out] and bias [out] per dense layer, the head last
Layers = list[tuple[np.ndarray, np.ndarray]]


@dataclass
class RolloutWeights:
    """An actor-critic's weights as numpy arrays, kernels laid out [in, out] (x @ kernel + bias)."""

    actor: Layers
    critic: Layers
    log_std: np.ndarray | None  # Gaussian policies' state-independent log std, [act_dim]
    encoder: EncoderWeights | None = None  # image keys' CNNs (train.core.numpy_encoder), shared by both


def sample_categorical(
    out: np.ndarray, noise: np.ndarray, nvec: tuple[int, ...] | None
) -> tuple[np.ndarray, np.ndarray]:
    """(action, log-prob) per row of categorical logits `out` with Gumbel `noise`: argmax(logits + g)
    samples softmax(logits). `nvec` None: one head, actions [rows]; else one head per component over
    consecutive slices of `out`, actions [rows, components] and the log-probs summed (the components
    are independent: SB3's MultiCategoricalDistribution)."""
    if nvec is None:
        return _one_head(out, noise)
    actions, logp = [], np.zeros(len(out), np.float32)
    at = 0
    for n in nvec:
        a, lp = _one_head(out[:, at : at + n], noise[:, at : at + n])
        actions.append(a)
        logp += lp
        at += n
    return np.stack(actions, -1), logp


def _one_head(out: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    action = (out + noise).argmax(-1)
    shifted = out - out.max(-1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(-1))
    return action, (shifted[np.arange(len(action)), action] - log_z).astype(np.float32, copy=False)


def argmax_heads(out: np.ndarray, nvec: tuple[int, ...] | None) -> np.ndarray:
    """The deterministic action of categorical logits: [rows] for one head, [rows, components] for `nvec`."""
    if nvec is None:
        return out.argmax(-1)
    cuts = np.cumsum(nvec)[:-1]
    return np.stack([part.argmax(-1) for part in np.split(out, cuts, axis=-1)], -1)


class NumpyActorCritic:
    """Samples PPO's policy from given per-env noise: argmax(logits + Gumbel) for discrete actions,
    mean + std * normal for Gaussian ones, with the log-prob and the value of each row."""

    def __init__(self, network: NetworkSpec):
        if network.activation not in ("tanh", "relu"):
            raise ValueError(f"no numpy form of activation {network.activation!r}")
        self.discrete = network.is_discrete
        self.nvec = network.action_nvec
        self._tanh = network.activation == "tanh"
        self._w: RolloutWeights | None = None
        self._encoder = NumpyEncoder(network.encoder) if network.encoder else None

    def load(self, weights: RolloutWeights) -> None:
        """Take a copy (the framework's arrays may be views its optimizer updates in place), contiguous and
        float32, so that every matmul of the rollout reads the same frozen weights."""
        copy = lambda layers: [  # noqa: E731
            (np.array(k, np.float32, order="C"), np.array(b, np.float32)) for k, b in layers
        ]
        std = None if weights.log_std is None else np.array(weights.log_std, np.float32)
        self._w = RolloutWeights(copy(weights.actor), copy(weights.critic), std)
        if self._encoder is not None:
            assert weights.encoder is not None, "the network has an encoder: its weights are needed"
            self._encoder.load(weights.encoder)
        if std is not None:
            self._std = np.exp(std)
            self._logp_const = np.float32(-std.sum() - 0.5 * LOG_2PI * std.size)

    def _mlp(self, layers: Layers, x: np.ndarray) -> np.ndarray:
        last = len(layers) - 1
        for i, (kernel, bias) in enumerate(layers):
            x = x @ kernel
            x += bias
            if i < last:
                if self._tanh:
                    np.tanh(x, out=x)
                else:
                    np.maximum(x, 0.0, out=x)
        return x

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, log-prob, value) per row; `noise` [rows, width] as train.core.rollout_collector draws it."""
        w = self._w
        assert w is not None, "load() the weights first"
        h = self._features(obs)
        out = self._mlp(w.actor, h)
        if self.discrete:
            action, logp = sample_categorical(out, noise, self.nvec)
        else:
            action = out + self._std * noise
            # log N(action; out, std) with (action - out) / std = noise
            logp = self._logp_const - 0.5 * np.einsum("ij,ij->i", noise, noise)
        return action, logp.astype(np.float32, copy=False), self._value(h)

    def value(self, obs: np.ndarray) -> np.ndarray:
        return self._value(self._features(obs))

    def _features(self, obs: np.ndarray) -> np.ndarray:
        return obs if self._encoder is None else self._encoder(obs)

    def _value(self, h: np.ndarray) -> np.ndarray:
        w = self._w
        assert w is not None, "load() the weights first"
        return self._mlp(w.critic, h)[:, 0]
