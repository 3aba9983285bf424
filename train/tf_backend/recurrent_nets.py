"""The recurrent actor-critic in TensorFlow: the twin of train.torch_backend.recurrent_nets, with the same
layout (an LSTM or GRU in front of the actor's MLP; in front of the critic's its own, the actor's output
with its gradient stopped, or a Dense layer) and torch's gate order (i, f, g, o; r, z, n), so that weights
copy across (`copy_from_torch`, for the parity tests) and one numpy rollout serves both.

The cell is written as its step arithmetic on explicit variables (a kernel on the input, one on h, and
torch's two biases b_ih and b_hh: one bias would train at half their sum's speed under Adam or RMSprop,
whose step per variable does not scale with the gradient), run over a sequence by a loop over its steps with each env's state zeroed where
its episode starts: one loop in the training graph, traced once for any sequence length and env count.
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from rl2edge.errors import CheckpointError
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.tf_backend.nets import TFActorCritic

RNNLayer = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class TFRNN(keras.layers.Layer):
    """A stacked LSTM's or GRU's weights (torch's layout: a kernel on the input [in, G*H], one on h [H, G*H],
    b_ih and b_hh [G*H]) and PyTorch's init (uniform in +-1/sqrt(hidden) for every weight and both biases).
    A subclass gives `gates` (G) and `step`; a state is a tuple of [layers, rows, H] tensors."""

    gates = 0

    def __init__(self, in_dim: int, hidden: int, layers: int, seed: int, name: str):
        super().__init__(name=name)
        self.hidden, self.n_layers = hidden, layers
        bound = 1.0 / math.sqrt(hidden)
        seeds = iter(range(seed, seed + 4 * layers))
        uniform = lambda: keras.initializers.RandomUniform(-bound, bound, seed=next(seeds))  # noqa: E731
        width = self.gates * hidden
        self.cells: list[tuple[Any, Any, Any, Any]] = []
        for k in range(layers):
            n_in = in_dim if k == 0 else hidden
            k_ih = self.add_weight(shape=(n_in, width), initializer=uniform(), name=f"kernel_ih_{k}")
            k_hh = self.add_weight(shape=(hidden, width), initializer=uniform(), name=f"kernel_hh_{k}")
            b_ih = self.add_weight(shape=(width,), initializer=uniform(), name=f"bias_ih_{k}")
            b_hh = self.add_weight(shape=(width,), initializer=uniform(), name=f"bias_hh_{k}")
            self.cells.append((k_ih, k_hh, b_ih, b_hh))
        self.built = True

    def step(self, x: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        """One step on [rows, in]: the top layer's h, and the new state."""
        raise NotImplementedError

    def sequence(self, x: tf.Tensor, starts: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """The top layer's h over [T, E, in], each env's state zeroed where starts[t, e] is 1."""
        steps = tf.shape(x)[0]
        out = tf.TensorArray(tf.float32, size=steps)
        for t in tf.range(steps):
            keep = (1.0 - starts[t])[None, :, None]
            y, state = self.step(x[t], tuple(s * keep for s in state))
            out = out.write(t, y)
        return out.stack()

    def numpy_layers(self) -> list[RNNLayer]:
        """Per layer (kernel on x, kernel on h, b_ih, b_hh): train.core.rnn_cells' layout."""
        return [tuple(v.numpy() for v in cell) for cell in self.cells]

    def copy_from_torch(self, state: dict[str, Any], prefix: str) -> None:
        """Take torch's nn.LSTM/nn.GRU weights (weight_ih_l{k} [G*H, in], weight_hh_l{k}, bias_ih_l{k},
        bias_hh_l{k})."""
        value = lambda name: np.asarray(state[f"{prefix}.{name}"].detach().cpu().numpy())  # noqa: E731
        for k, (k_ih, k_hh, b_ih, b_hh) in enumerate(self.cells):
            k_ih.assign(value(f"weight_ih_l{k}").T)
            k_hh.assign(value(f"weight_hh_l{k}").T)
            b_ih.assign(value(f"bias_ih_l{k}"))
            b_hh.assign(value(f"bias_hh_l{k}"))


class TFLSTM(TFRNN):
    """torch's nn.LSTM: gates i, f, g, o; state (h, c)."""

    gates = 4

    def step(self, x: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        h, c = state
        hs, cs = [], []
        for k, (k_ih, k_hh, b_ih, b_hh) in enumerate(self.cells):
            gates = tf.matmul(x, k_ih) + tf.matmul(h[k], k_hh) + (b_ih + b_hh)
            i, f, g, o = tf.split(gates, 4, axis=-1)
            c_k = tf.sigmoid(f) * c[k] + tf.sigmoid(i) * tf.tanh(g)
            x = tf.sigmoid(o) * tf.tanh(c_k)
            hs.append(x)
            cs.append(c_k)
        return x, (tf.stack(hs), tf.stack(cs))


class TFGRU(TFRNN):
    """torch's nn.GRU: gates r, z, n, with b_hn inside the reset gate's product; state (h,)."""

    gates = 3

    def step(self, x: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tuple[tf.Tensor, ...]]:
        (h,) = state
        hs = []
        for k, (k_ih, k_hh, b_ih, b_hh) in enumerate(self.cells):
            i_r, i_z, i_n = tf.split(tf.matmul(x, k_ih) + b_ih, 3, axis=-1)
            h_r, h_z, h_n = tf.split(tf.matmul(h[k], k_hh) + b_hh, 3, axis=-1)
            r, z = tf.sigmoid(i_r + h_r), tf.sigmoid(i_z + h_z)
            n = tf.tanh(i_n + r * h_n)
            x = n + z * (h[k] - n)
            hs.append(x)
        return x, (tf.stack(hs),)


class TFRecurrentActorCritic(keras.Model):
    def __init__(self, spec: NetworkSpec, seed: int = 0):
        super().__init__()
        obs_dim, hidden, layers = (
            int(spec.obs_dim),
            int(spec.required("lstm_hidden_size")),
            int(spec.required("n_lstm_layers")),
        )
        if int(spec.lstm_biases or 1) != 2:
            raise CheckpointError(
                "this TF recurrent checkpoint's LSTM has one bias per layer (written before the TF LSTM kept "
                "torch's two, b_ih and b_hh, which train at the speed torch's do): train it again"
            )
        self.discrete, self.hidden, self.n_layers = spec.is_discrete, hidden, layers
        self.kind = spec.rnn_kind
        self.shared = bool(spec.required("shared_lstm"))
        cell = TFGRU if self.kind == "gru" else TFLSTM
        self.heads = TFActorCritic(
            hidden, spec.act_dim, spec.is_discrete, list(spec.net_arch), spec.activation,
            (spec.log_std_init or 0.0), seed, None, spec.action_nvec,
        )  # fmt: skip
        self.lstm_actor = cell(obs_dim, hidden, layers, seed + 3000, "lstm_actor")
        self.lstm_critic = (
            cell(obs_dim, hidden, layers, seed + 4000, "lstm_critic") if spec.enable_critic_lstm else None
        )
        self.critic_linear = None
        if not spec.enable_critic_lstm and not self.shared:
            self.critic_linear = keras.Sequential(
                [keras.Input((obs_dim,)), keras.layers.Dense(hidden, name="critic_linear")],
                name="critic_linear",
            )
        self.built = True

    def evaluate_sequences(
        self, obs: tf.Tensor, actions: tf.Tensor, starts: tf.Tensor, pi: tuple[Any, ...], vf: tuple[Any, ...]
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Log-probs, entropies and values of [T, E] steps, flattened to [T * E] in (t, e) order; `pi` and
        `vf` the actor's and the critic's states at the first step (the critic's unread without its RNN)."""
        latent_pi = self.lstm_actor.sequence(obs, starts, tuple(pi))
        if self.lstm_critic is not None:
            latent_vf = self.lstm_critic.sequence(obs, starts, tuple(vf))
        elif self.shared:
            latent_vf = tf.stop_gradient(latent_pi)
        else:
            assert self.critic_linear is not None
            latent_vf = self.critic_linear(tf.reshape(obs, [-1, tf.shape(obs)[-1]]))
        n = tf.shape(obs)[0] * tf.shape(obs)[1]
        flat_actions = tf.reshape(actions, tf.concat([[n], tf.shape(actions)[2:]], 0))
        out = self.heads.actor(tf.reshape(latent_pi, [n, self.hidden]))
        logp, entropy = self.heads.log_prob_entropy(out, flat_actions)
        values = self.heads.critic(tf.reshape(latent_vf, [n, self.hidden]))[:, 0]
        return logp, entropy, values

    def copy_from_torch(self, state: dict[str, Any]) -> None:
        """Take a torch RecurrentActorCritic's state_dict (the parity tests)."""
        self.heads.copy_from_torch(
            {k[len("heads.") :]: v for k, v in state.items() if k.startswith("heads.")}
        )
        self.lstm_actor.copy_from_torch(state, "lstm_actor")
        if self.lstm_critic is not None:
            self.lstm_critic.copy_from_torch(state, "lstm_critic")
        if self.critic_linear is not None:
            dense = self.critic_linear.layers[-1]
            dense.kernel.assign(state["critic_linear.weight"].detach().numpy().T)
            dense.bias.assign(state["critic_linear.bias"].detach().numpy())
