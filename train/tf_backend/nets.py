"""Every network of the TF backend in Keras 3, built with one MLP builder: the twins of
train.torch_backend.nets.

PPO (`TFActorCritic`): separate actor and critic, orthogonal init, state-independent log std for Box
actions; `copy_from_torch` maps weights across (Dense kernel [in, out] <-> Linear weight [out, in]).

Off-policy: SAC's squashed Gaussian actor and twin critics, TD3/DDPG's tanh actor and critics, DQN's
Q-network, each with its target networks, plus the polyak update as variable assignments that run inside
compiled graphs. Their initialization follows PyTorch's nn.Linear default (uniform in +-1/sqrt(fan_in) for
weights and biases), as SB3 uses for these algorithms.

Every initializer gets its own seed: Keras 3 initializers that share a seed draw the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from rl2edge.train.core.encoder_spec import features_dim
from rl2edge.train.core.network_spec import EncoderSpec, NetworkSpec
from rl2edge.train.tf_backend.encoder import TFObsEncoder, copy_value

LOG_2PI = math.log(2 * math.pi)


def _dense(
    width: int,
    fan_in: int,
    activation: str | None,
    seed: int,
    name: str,
    orthogonal_gain: float | None = None,
) -> keras.layers.Dense:
    if orthogonal_gain is not None:  # PPO's init
        kernel: Any = keras.initializers.Orthogonal(orthogonal_gain, seed=seed)
        bias: Any = "zeros"
    else:  # PyTorch's nn.Linear default
        bound = 1.0 / math.sqrt(fan_in)
        kernel = keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform", seed=seed)
        bias = keras.initializers.RandomUniform(-bound, bound, seed=seed + 1)
    return keras.layers.Dense(
        width, activation=activation, name=name, kernel_initializer=kernel, bias_initializer=bias
    )


def mlp(
    in_dim: int,
    hidden: list[int],
    activation: str,
    out_dim: int | None,
    seeds: Iterator[int],
    name: str,
    out_activation: str | None = None,
    orthogonal_gain: float | None = None,
) -> keras.Sequential:
    """Dense layers of `hidden` widths, then a head of `out_dim` (none if None); one seed from `seeds` per
    layer. With `orthogonal_gain`, PPO's init (gain sqrt(2), the head's `orthogonal_gain`, zero biases)."""
    layers: list[Any] = [keras.Input((in_dim,))]
    last = in_dim
    hidden_gain = None if orthogonal_gain is None else math.sqrt(2)
    for i, width in enumerate(hidden):
        layers.append(_dense(width, last, activation, next(seeds), f"{name}_{i}", hidden_gain))
        last = width
    if out_dim is not None:
        layers.append(_dense(out_dim, last, out_activation, next(seeds), f"{name}_out", orthogonal_gain))
    return keras.Sequential(layers, name=name)


def _ppo_seeds(seed: int, n_hidden: int) -> Iterator[int]:
    """PPO's layer seeds as they always were: seed + i for hidden layer i, seed + 100 for the head."""
    return iter([*(seed + i for i in range(n_hidden)), seed + 100])


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
        encoder: EncoderSpec | None = None,
        nvec: tuple[int, ...] | None = None,
    ):
        """`encoder`: image keys' CNNs (train.core.encoder_spec), shared by the actor and the critic.
        `nvec`: a MultiDiscrete action's choices per component (one categorical head each, as torch's)."""
        super().__init__()
        self.discrete, self.act_dim = discrete, act_dim
        self.nvec = None if nvec is None else [int(n) for n in nvec]
        in_dim = obs_dim if encoder is None else features_dim(encoder)
        self.actor = mlp(
            in_dim,
            net_arch,
            activation,
            act_dim,
            _ppo_seeds(seed, len(net_arch)),
            "actor",
            orthogonal_gain=0.01,
        )
        self.critic = mlp(
            in_dim,
            net_arch,
            activation,
            1,
            _ppo_seeds(seed + 1000, len(net_arch)),
            "critic",
            orthogonal_gain=1.0,
        )
        self.log_std = (
            None
            if discrete
            else self.add_weight(
                shape=(act_dim,), initializer=keras.initializers.Constant(log_std_init), name="log_std"
            )
        )
        self.encoder = (
            None if encoder is None else TFObsEncoder(encoder, iter(range(seed + 2000, seed + 2100)))
        )
        self.built = True  # the sublayers are built from their Input shapes; nothing is deferred

    @classmethod
    def from_network_spec(cls, spec: NetworkSpec, seed: int = 0) -> TFActorCritic:
        return cls(
            spec.obs_dim,
            spec.act_dim,
            spec.is_discrete,
            list(spec.net_arch),
            spec.activation,
            (spec.log_std_init or 0.0),
            seed,
            spec.encoder,
            spec.action_nvec,
        )

    def features(self, obs: tf.Tensor) -> tf.Tensor:
        return obs if self.encoder is None else self.encoder(obs)

    def outputs(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The actor's output (logits, or the Gaussian's mean) and the value, on one pass of the encoder."""
        h = self.features(obs)
        return self.actor(h), self.critic(h)[:, 0]

    def actor_out(self, obs: tf.Tensor) -> tf.Tensor:
        return self.actor(self.features(obs))

    def value(self, obs: tf.Tensor) -> tf.Tensor:
        return self.critic(self.features(obs))[:, 0]

    def log_prob_entropy(self, out: tf.Tensor, actions: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Log-probability of `actions` and the entropy, under the distribution the actor's output defines."""
        if self.nvec is not None:  # one categorical per component; log-probs and entropies summed
            parts = tf.split(out, self.nvec, axis=-1)
            idx = tf.cast(actions, tf.int32)
            logps, entropies = [], []
            for i, part in enumerate(parts):
                logp_all = tf.nn.log_softmax(part)
                logps.append(tf.gather(logp_all, idx[:, i], batch_dims=1))
                entropies.append(-tf.reduce_sum(tf.exp(logp_all) * logp_all, axis=-1))
            return tf.add_n(logps), tf.add_n(entropies)
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

    def argmax(self, out: tf.Tensor) -> tf.Tensor:
        """The categorical action of logits `out`: [B] for one head, [B, components] for `nvec`."""
        if self.nvec is None:
            return tf.argmax(out, axis=-1)
        return tf.stack([tf.argmax(part, axis=-1) for part in tf.split(out, self.nvec, axis=-1)], axis=-1)

    # --- weights across frameworks: the names of torch's ActorCritic.state_dict()
    def _pairs(self) -> list[tuple[str, Any]]:
        pairs: list[tuple[str, Any]] = []
        for prefix, seq in (("actor", self.actor), ("critic", self.critic)):
            dense = [layer for layer in seq.layers if isinstance(layer, keras.layers.Dense)]
            for i, layer in enumerate(dense):
                pairs += [(f"{prefix}.{2 * i}.weight", layer.kernel), (f"{prefix}.{2 * i}.bias", layer.bias)]
        if self.log_std is not None:
            pairs.append(("log_std", self.log_std))
        if self.encoder is not None:
            pairs += self.encoder.pairs("encoder")
        return pairs

    def copy_from_torch(self, state: dict[str, Any]) -> None:
        for name, var in self._pairs():
            value = np.asarray(
                state[name].detach().cpu().numpy() if hasattr(state[name], "detach") else state[name]
            )
            var.assign(copy_value(name, value))


def dense_layers(model: keras.Model) -> list[keras.layers.Dense]:
    """A chain's Dense layers in order (an EncodedMLP's: its MLP's, after the encoder)."""
    if isinstance(model, EncodedMLP):
        model = model.mlp
    return [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]


class EncodedMLP(keras.Model):
    """An image-key encoder (TFObsEncoder), then an MLP: an off-policy network on a Dict with image keys,
    callable and with trainable_variables as the bare MLP is, so the agents' code does not change."""

    def __init__(self, encoder: TFObsEncoder, mlp: keras.Sequential, name: str):
        super().__init__(name=name)
        self.mlp = mlp  # first: its variables come before the encoder's, as in torch's state_dict
        self.encoder = encoder
        self.built = True

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return self.mlp(self.encoder(x))


def obs_width(spec: NetworkSpec) -> int:
    """What a network's first Dense layer takes: the observation, or its encoder's features."""
    return spec.obs_dim if spec.encoder is None else features_dim(spec.encoder)


def off_policy_encoder(spec: NetworkSpec, seed: int, name: str) -> TFObsEncoder | None:
    """An off-policy network's own encoder (PyTorch's default init, as the torch twin); seeds from `seed`
    on, apart from the Dense layers' (train.tf_backend.nets._seeds)."""
    if spec.encoder is None:
        return None
    return TFObsEncoder(spec.encoder, iter(range(seed, seed + 100)), name, orthogonal=False)


def with_encoder(spec: NetworkSpec, model: keras.Sequential, seed: int) -> keras.Model:
    """`model` behind its own encoder when the spec has image keys, else `model` itself."""
    encoder = off_policy_encoder(spec, seed, f"{model.name}_encoder")
    return model if encoder is None else EncodedMLP(encoder, model, f"{model.name}_encoded")


def encoder_fn_of(model: keras.Model) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """The frozen encoder of an EncodedMLP (export's DeployParts.encoder_fn), else None."""
    return model.encoder.frozen() if isinstance(model, EncodedMLP) else None


def encoder_variables(encoder: TFObsEncoder | None) -> list[tf.Variable]:
    return [] if encoder is None else encoder.variables_in_order


def frozen_dense(dense: list[keras.layers.Dense]) -> Callable[[tf.Tensor], tf.Tensor]:
    """A chain of Dense layers with its weights as graph constants. A SavedModel whose Keras 3 variables
    are left as variables converts to a TFLite file that reads them as zeros; constants convert exactly."""
    layers = [(tf.constant(d.kernel.numpy()), tf.constant(d.bias.numpy()), d.activation) for d in dense]

    def actor(x: Any) -> Any:
        for kernel, bias, activation in layers:
            x = activation(tf.matmul(x, kernel) + bias)
        return x

    return actor


@dataclass
class DeployParts:
    """What a TF agent's exported graph is built from (its `deploy_parts`, read by export.tf_graph): the
    deterministic path from the normalized observation to the head's input and, where the policy has a
    distribution that `--noise policy` samples, its log std."""

    dense: list[keras.layers.Dense]
    """The deterministic path as a chain of Dense layers (frozen as graph constants)."""
    actor_fn: Callable[[tf.Tensor], tf.Tensor] | None = None
    """Instead of `dense`, a path that is not a chain of Dense layers (Rainbow's dueling/C51 head), its
    weights already constants."""
    log_std_dense: keras.layers.Dense | None = None
    """A log std computed on the latent of the first `latent_depth` layers of `dense`, clipped to
    `log_std_bounds` (a squashed Gaussian's)."""
    latent_depth: int = 0
    log_std_bounds: tuple[float, float] = (-20.0, 2.0)
    log_std_const: np.ndarray | None = None
    """A state-independent log std."""
    encoder_fn: Callable[[tf.Tensor], tf.Tensor] | None = None
    """Image keys: the actor's encoder (its weights constants), between the normalization and the layers."""
    rnn: tuple[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]] | None = None
    """A recurrent actor: its cell ("lstm" or "gru") and layers (kernel on the input [in, G*H], on h
    [H, G*H], b_ih, b_hh: train.core.rnn_cells' layout), between the normalization and `dense`; exported as
    one cell with explicit state I/O."""


def copy_weights(source: list[tf.Variable], target: list[tf.Variable]) -> None:
    for s, t in zip(source, target, strict=True):
        t.assign(s)


def polyak_update(source: list[tf.Variable], target: list[tf.Variable], tau: float) -> None:
    """target <- target + tau * (source - target), in place (graph or eager); tau == 1 copies exactly."""
    for s, t in zip(source, target, strict=True):
        t.assign(s if tau == 1.0 else t + tau * (s - t))


def _seeds(seed: int) -> Iterator[int]:
    n = seed * 1000
    while True:
        n += 2  # each dense layer takes two (kernel, bias)
        yield n


def _critics(spec: NetworkSpec, n: int, seeds: Iterator[int], name: str) -> list[keras.Sequential]:
    in_dim = obs_width(spec) + spec.act_dim
    return [mlp(in_dim, list(spec.net_arch), spec.activation, 1, seeds, f"{name}{i}") for i in range(n)]


def q_values(
    critics: list[keras.Sequential], obs: tf.Tensor, action: tf.Tensor, encoder: TFObsEncoder | None = None
) -> list[tf.Tensor]:
    """Each critic's Q(obs, action); with image keys, on the features of the critics' shared `encoder`."""
    x = tf.concat([obs if encoder is None else encoder(obs), action], axis=-1)
    return [c(x)[:, 0] for c in critics]


def variables(models: list[keras.Sequential]) -> list[tf.Variable]:
    return [v for m in models for v in m.trainable_variables]


class CriticSet:
    """SAC's and TD3's critics and their targets, each set with its encoder (image keys; None without):
    their variables in the order copies and polyak updates pair them up, and their Q-values."""

    critics: list[keras.Sequential]
    critic_targets: list[keras.Sequential]
    critic_encoder: TFObsEncoder | None
    critic_target_encoder: TFObsEncoder | None

    @property
    def critic_variables(self) -> list[tf.Variable]:
        return variables(self.critics) + encoder_variables(self.critic_encoder)

    @property
    def critic_target_variables(self) -> list[tf.Variable]:
        return variables(self.critic_targets) + encoder_variables(self.critic_target_encoder)

    def q(self, obs: tf.Tensor, action: tf.Tensor, first: bool = False) -> list[tf.Tensor]:
        """Every critic's Q, or (`first`) Q_1 alone (TD3's actor loss)."""
        critics = self.critics[:1] if first else self.critics
        return q_values(critics, obs, action, self.critic_encoder)

    def q_target(self, obs: tf.Tensor, action: tf.Tensor) -> list[tf.Tensor]:
        return q_values(self.critic_targets, obs, action, self.critic_target_encoder)


class SACNets(CriticSet, keras.Model):
    def __init__(self, spec: NetworkSpec, seed: int = 0, ent_coef_init: float = 1.0):
        super().__init__()
        seeds = _seeds(seed)
        hidden = list(spec.net_arch)
        latent = mlp(obs_width(spec), hidden, spec.activation, None, seeds, "actor_latent")
        # image keys: the actor's own encoder in front of its latent, one shared by the critics, and the
        # target critics' copy of it (SB3's off-policy networks do not share extractors)
        self.latent = with_encoder(spec, latent, seed * 1000 + 500)
        self.mu = mlp(hidden[-1], [], spec.activation, spec.act_dim, seeds, "actor_mu")
        self.log_std = mlp(hidden[-1], [], spec.activation, spec.act_dim, seeds, "actor_log_std")
        self.log_std_min, self.log_std_max = (
            float(spec.required("log_std_min")),
            float(spec.required("log_std_max")),
        )
        self.critics = _critics(spec, 2, seeds, "critic")
        self.critic_targets = _critics(spec, 2, seeds, "critic_target")
        self.critic_encoder = off_policy_encoder(spec, seed * 1000 + 600, "critic_encoder")
        self.critic_target_encoder = off_policy_encoder(spec, seed * 1000 + 700, "critic_target_encoder")
        copy_weights(self.critic_variables, self.critic_target_variables)
        self.log_alpha = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(math.log(ent_coef_init)), name="log_alpha"
        )
        self.built = True

    @property
    def actor_variables(self) -> list[tf.Variable]:
        return variables([self.latent, self.mu, self.log_std])

    def mean(self, obs: tf.Tensor) -> tf.Tensor:
        return self.mu(self.latent(obs))

    def sample(self, obs: tf.Tensor, eps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """tanh(mean + std * eps) and its log-probability, with SB3's tanh correction."""
        h = self.latent(obs)
        mean = self.mu(h)
        log_std = tf.clip_by_value(self.log_std(h), self.log_std_min, self.log_std_max)
        action = tf.tanh(mean + tf.exp(log_std) * eps)
        logp = tf.reduce_sum(-0.5 * tf.square(eps) - log_std - 0.5 * LOG_2PI, axis=-1)
        logp -= tf.reduce_sum(tf.math.log(1.0 - tf.square(action) + 1e-6), axis=-1)
        return action, logp


class TD3Nets(CriticSet, keras.Model):
    def __init__(self, spec: NetworkSpec, seed: int = 0):
        super().__init__()
        seeds = _seeds(seed)
        args = (obs_width(spec), list(spec.net_arch), spec.activation, spec.act_dim)
        # image keys: an encoder per actor and per critic set, each target with its own copy (as SACNets)
        self.actor = with_encoder(spec, mlp(*args, seeds, "actor", out_activation="tanh"), seed * 1000 + 500)
        self.actor_target = with_encoder(
            spec, mlp(*args, seeds, "actor_target", out_activation="tanh"), seed * 1000 + 600
        )
        self.critics = _critics(spec, int(spec.required("n_critics")), seeds, "critic")
        self.critic_targets = _critics(spec, int(spec.required("n_critics")), seeds, "critic_target")
        self.critic_encoder = off_policy_encoder(spec, seed * 1000 + 700, "critic_encoder")
        self.critic_target_encoder = off_policy_encoder(spec, seed * 1000 + 800, "critic_target_encoder")
        copy_weights(self.actor.trainable_variables, self.actor_target.trainable_variables)
        copy_weights(self.critic_variables, self.critic_target_variables)
        self.built = True


class DQNNets(keras.Model):
    def __init__(self, spec: NetworkSpec, seed: int = 0):
        super().__init__()
        seeds = _seeds(seed)
        args = (obs_width(spec), list(spec.net_arch), spec.activation, spec.act_dim)
        self.q_net = with_encoder(spec, mlp(*args, seeds, "q_net"), seed * 1000 + 500)
        self.q_target = with_encoder(spec, mlp(*args, seeds, "q_target"), seed * 1000 + 600)
        copy_weights(self.q_net.trainable_variables, self.q_target.trainable_variables)
        self.built = True


class NoisyDense(keras.layers.Layer):
    """The twin of torch's NoisyLinear (factorized Gaussian): `call(x)` uses the mean weights, `call(x, noise)`
    the (eps_in, eps_out) pair drawn by `draw_noise` from the agent's one generator."""

    def __init__(self, units: int, fan_in: int, sigma0: float, activation: str | None, seed: int, name: str):
        super().__init__(name=name)
        bound = 1.0 / math.sqrt(fan_in)
        uniform = lambda s: keras.initializers.RandomUniform(-bound, bound, seed=s)  # noqa: E731
        sigma = keras.initializers.Constant(sigma0 * bound)
        self.units, self.fan_in = units, fan_in
        self.activation = keras.activations.get(activation)
        self.kernel_mu = self.add_weight(shape=(fan_in, units), initializer=uniform(seed), name="kernel_mu")
        self.kernel_sigma = self.add_weight(shape=(fan_in, units), initializer=sigma, name="kernel_sigma")
        self.bias_mu = self.add_weight(shape=(units,), initializer=uniform(seed + 1), name="bias_mu")
        self.bias_sigma = self.add_weight(shape=(units,), initializer=sigma, name="bias_sigma")
        self.built = True

    def draw_noise(self, rng: tf.random.Generator) -> tuple[tf.Tensor, tf.Tensor]:
        f = lambda x: tf.sign(x) * tf.sqrt(tf.abs(x))  # noqa: E731
        return f(rng.normal([self.fan_in])), f(rng.normal([self.units]))

    def call(self, x: tf.Tensor, noise: tuple[tf.Tensor, tf.Tensor] | None = None) -> tf.Tensor:
        if noise is None:
            return self.activation(tf.matmul(x, self.kernel_mu) + self.bias_mu)
        eps_in, eps_out = noise
        kernel = self.kernel_mu + self.kernel_sigma * (eps_in[:, None] * eps_out[None, :])
        return self.activation(tf.matmul(x, kernel) + self.bias_mu + self.bias_sigma * eps_out)


class RainbowQ(keras.Model):
    """The twin of torch's RainbowQNetwork: plain trunk, advantage (and value) streams of two layers each,
    noisy or plain, dueling aggregation per atom, expected Q over the C51 support. With every switch off its
    layers and their seeds are DQNNets' q_net's, in the same order."""

    def __init__(self, spec: NetworkSpec, seeds: Iterator[int], name: str, encoder_seed: int = 0):
        """`encoder_seed`: the first seed of its encoder's layers (image keys), as DQNNets seeds its own."""
        super().__init__(name=name)
        hidden, act = list(spec.net_arch), spec.activation
        self.n_actions, self.n_atoms = int(spec.act_dim), int(spec.required("n_atoms"))
        self.distributional, self.dueling = (
            bool(spec.required("distributional")),
            bool(spec.required("dueling")),
        )
        self.noisy, sigma0 = (
            bool(spec.required("noisy")),
            float(0.5 if spec.noisy_sigma0 is None else spec.noisy_sigma0),
        )
        width = obs_width(spec)
        self.trunk = mlp(width, hidden[:-1], act, None, seeds, f"{name}_trunk") if len(hidden) > 1 else None
        last = hidden[-2] if len(hidden) > 1 else width

        def stream(out_dim: int, tag: str) -> list[Any]:
            if self.noisy:
                return [
                    NoisyDense(hidden[-1], last, sigma0, act, next(seeds), f"{name}_{tag}_0"),
                    NoisyDense(out_dim, hidden[-1], sigma0, None, next(seeds), f"{name}_{tag}_out"),
                ]
            layers = [
                _dense(hidden[-1], last, act, next(seeds), f"{name}_{tag}_0"),
                _dense(out_dim, hidden[-1], None, next(seeds), f"{name}_{tag}_out"),
            ]
            layers[0].build((None, last))
            layers[1].build((None, hidden[-1]))
            return layers

        self.advantage = stream(self.n_actions * self.n_atoms, "advantage")
        self.value = stream(self.n_atoms, "value") if self.dueling else []
        self.support = tf.linspace(float(spec.required("v_min")), float(spec.required("v_max")), self.n_atoms)
        # image keys: plain layers in front of the trunk (the noise stays in the head streams)
        self.encoder = off_policy_encoder(spec, encoder_seed, f"{name}_encoder")
        self.built = True

    def noisy_layers(self) -> list[NoisyDense]:
        return [layer for layer in (*self.advantage, *self.value) if isinstance(layer, NoisyDense)]

    def draw_noise(self, rng: tf.random.Generator) -> list[tuple[tf.Tensor, tf.Tensor]] | None:
        return [layer.draw_noise(rng) for layer in self.noisy_layers()] if self.noisy else None

    def _stream(self, layers: list[Any], h: tf.Tensor, noise: list[Any] | None) -> tf.Tensor:
        for layer in layers:
            h = layer(h, noise.pop(0)) if noise is not None else layer(h)
        return h

    def logits(self, obs: tf.Tensor, noise: list[Any] | None = None) -> tf.Tensor:
        """[B, A, atoms], as RainbowQNetwork.logits; `noise` from draw_noise, or None for the mean weights."""
        noise = list(noise) if noise is not None else None
        h = obs if self.encoder is None else self.encoder(obs)
        h = self.trunk(h) if self.trunk is not None else h
        adv = tf.reshape(self._stream(self.advantage, h, noise), [-1, self.n_actions, self.n_atoms])
        if not self.dueling:
            return adv
        value = tf.reshape(self._stream(self.value, h, noise), [-1, 1, self.n_atoms])
        return value + adv - tf.reduce_mean(adv, axis=1, keepdims=True)

    def expected_q(self, logits: tf.Tensor) -> tf.Tensor:
        if not self.distributional:
            return logits[..., 0]
        return tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * self.support, axis=-1)

    def call(self, obs: tf.Tensor, noise: list[Any] | None = None) -> tf.Tensor:
        return self.expected_q(self.logits(obs, noise))

    def frozen_expected_q(self) -> Any:
        """obs (normalized) -> expected Q with the mean weights as graph constants (the export's actor)."""

        def const(layer: Any) -> tuple[tf.Tensor, tf.Tensor, Any]:
            kernel = layer.kernel_mu if isinstance(layer, NoisyDense) else layer.kernel
            bias = layer.bias_mu if isinstance(layer, NoisyDense) else layer.bias
            return tf.constant(kernel.numpy()), tf.constant(bias.numpy()), layer.activation

        trunk = [const(d) for d in dense_layers(self.trunk)] if self.trunk is not None else []
        encode = self.encoder.frozen() if self.encoder is not None else None
        adv, value = [const(d) for d in self.advantage], [const(d) for d in self.value]
        support = tf.constant(self.support.numpy())
        n_actions, n_atoms, dueling, distributional = (
            self.n_actions,
            self.n_atoms,
            self.dueling,
            self.distributional,
        )

        def chain(x: tf.Tensor, layers: list[Any]) -> tf.Tensor:
            for kernel, bias, activation in layers:
                x = activation(tf.matmul(x, kernel) + bias)
            return x

        def q(x: tf.Tensor) -> tf.Tensor:
            h = chain(x if encode is None else encode(x), trunk)
            a = tf.reshape(chain(h, adv), [-1, n_actions, n_atoms])
            if dueling:
                a = (
                    tf.reshape(chain(h, value), [-1, 1, n_atoms])
                    + a
                    - tf.reduce_mean(a, axis=1, keepdims=True)
                )
            if not distributional:
                return a[..., 0]
            return tf.reduce_sum(tf.nn.softmax(a, axis=-1) * support, axis=-1)

        return q


def project_distribution(
    probs: tf.Tensor, rewards: tf.Tensor, discounts: tf.Tensor, support: tf.Tensor
) -> tf.Tensor:
    """C51's projection, op for op the torch backend's (train.torch_backend.nets.project_distribution)."""
    n_atoms = support.shape[0]
    v_min, v_max = support[0], support[-1]
    delta = (v_max - v_min) / (n_atoms - 1)
    tz = tf.clip_by_value(rewards[:, None] + discounts[:, None] * support[None, :], v_min, v_max)
    b = (tz - v_min) / delta
    lower, upper = tf.floor(b), tf.math.ceil(b)
    m_lower = probs * (upper - b + tf.cast(tf.equal(upper, lower), probs.dtype))
    m_upper = probs * (b - lower)
    lower_hot = tf.one_hot(tf.cast(lower, tf.int32), n_atoms, dtype=probs.dtype)
    upper_hot = tf.one_hot(tf.minimum(tf.cast(upper, tf.int32), n_atoms - 1), n_atoms, dtype=probs.dtype)
    return tf.einsum("bk,bkj->bj", m_lower, lower_hot) + tf.einsum("bk,bkj->bj", m_upper, upper_hot)


class RainbowNets(keras.Model):
    def __init__(self, spec: NetworkSpec, seed: int = 0):
        super().__init__()
        seeds = _seeds(seed)
        self.q_net = RainbowQ(spec, seeds, "q_net", seed * 1000 + 500)
        self.q_target = RainbowQ(spec, seeds, "q_target", seed * 1000 + 600)
        copy_weights(self.q_net.trainable_variables, self.q_target.trainable_variables)
        self.built = True
