"""Actor-critic MLP in Keras 3, the twin of train.torch_backend.policy.ActorCritic: separate actor and
critic, orthogonal init, state-independent log std for Box actions. `copy_from_torch` maps
weights across (Dense kernel [in, out] <-> Linear weight [out, in])."""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

LOG_2PI = math.log(2 * math.pi)


def _mlp(
    in_dim: int, hidden: list[int], out_dim: int, activation: str, out_gain: float, seed: int, name: str
):
    layers: list[Any] = [keras.Input((in_dim,))]
    for i, width in enumerate(hidden):
        layers.append(
            keras.layers.Dense(
                width,
                activation=activation,
                name=f"{name}_{i}",
                kernel_initializer=keras.initializers.Orthogonal(math.sqrt(2), seed=seed + i),
                bias_initializer="zeros",
            )
        )
    layers.append(
        keras.layers.Dense(
            out_dim,
            name=f"{name}_out",
            kernel_initializer=keras.initializers.Orthogonal(out_gain, seed=seed + 100),
            bias_initializer="zeros",
        )
    )
    return keras.Sequential(layers, name=name)


class TFActorCritic(keras.Model):
    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: bool,
        net_arch: list[int],
        activation: str = "tanh",
        log_std_init: float = 0.0,
        seed: int = 0,
    ):
        super().__init__()
        self.discrete, self.act_dim = discrete, act_dim
        self.actor = _mlp(obs_dim, net_arch, act_dim, activation, 0.01, seed, "actor")
        self.critic = _mlp(obs_dim, net_arch, 1, activation, 1.0, seed + 1000, "critic")
        self.log_std = (
            None
            if discrete
            else self.add_weight(
                shape=(act_dim,), initializer=keras.initializers.Constant(log_std_init), name="log_std"
            )
        )
        self.built = True  # the sublayers are built from their Input shapes; nothing is deferred

    @classmethod
    def from_network_spec(cls, spec: dict[str, Any], seed: int = 0) -> TFActorCritic:
        return cls(
            spec["obs_dim"],
            spec["act_dim"],
            spec["discrete"],
            list(spec["net_arch"]),
            spec["activation"],
            spec.get("log_std_init", 0.0),
            seed,
        )

    def value(self, obs: tf.Tensor) -> tf.Tensor:
        return self.critic(obs)[:, 0]

    def log_prob_entropy(self, out: tf.Tensor, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Log-probability of `actions` and the entropy, under the distribution the actor's output defines."""
        if self.discrete:
            logp_all = tf.nn.log_softmax(out)
            logp = tf.gather(logp_all, tf.cast(actions, tf.int32), batch_dims=1)
            entropy = -tf.reduce_sum(tf.exp(logp_all) * logp_all, axis=-1)
            return logp, entropy
        log_std = tf.broadcast_to(self.log_std, tf.shape(out))
        z = (actions - out) / tf.exp(log_std)
        logp = tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * LOG_2PI, axis=-1)
        entropy = tf.reduce_sum(0.5 + 0.5 * LOG_2PI + log_std, axis=-1)
        return logp, entropy

    # --- weights across frameworks: the names of torch's ActorCritic.state_dict()
    def _pairs(self) -> list[tuple[str, Any]]:
        pairs: list[tuple[str, Any]] = []
        for prefix, seq in (("actor", self.actor), ("critic", self.critic)):
            dense = [layer for layer in seq.layers if isinstance(layer, keras.layers.Dense)]
            for i, layer in enumerate(dense):
                pairs += [(f"{prefix}.{2 * i}.weight", layer.kernel), (f"{prefix}.{2 * i}.bias", layer.bias)]
        if self.log_std is not None:
            pairs.append(("log_std", self.log_std))
        return pairs

    def copy_from_torch(self, state: dict[str, Any]) -> None:
        for name, var in self._pairs():
            value = np.asarray(
                state[name].detach().cpu().numpy() if hasattr(state[name], "detach") else state[name]
            )
            var.assign(value.T if name.endswith(".weight") else value)
