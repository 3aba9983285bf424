"""Recurrent PPO's TensorFlow side: the recurrent (LSTM or GRU) actor-critic (train.tf_backend.recurrent_nets), PPO's clipped
loss over whole env sequences, the optimizer step; every epoch's minibatches in one XLA call with a fixed
input signature (traced once: tests/test_recurrent_tf.py). The driver is train.core.onpolicy_driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.recurrent_config import RecurrentPPOConfig
from rl2edge.train.core.recurrent_rollout import RecurrentWeights, SequenceMinibatch
from rl2edge.train.core.rnn_cells import state_parts
from rl2edge.train.tf_backend.ppo import adam, ppo_objective
from rl2edge.train.tf_backend.setup import configure_tensorflow
from rl2edge.train.tf_backend.weights import save_keras_weights, state_copy

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts

FIELDS = ("obs", "actions", "old_logprobs", "old_values", "advantages", "returns", "starts")


def make_loss_fn(model: Any, cfg: RecurrentPPOConfig) -> Any:
    """PPO's loss over a minibatch of sequences, a plain function of tensors (traced in the training graph,
    called eagerly in tests): train.tf_backend.ppo's objective on the [T * E] flattened steps."""
    import tensorflow as tf

    def loss_fn(
        obs: Any,
        actions: Any,
        old_logp: Any,
        old_values: Any,
        adv: Any,
        returns: Any,
        starts: Any,
        pi: Any,
        vf: Any,
        clip: Any,
    ) -> Any:
        logp, entropy, values = model.evaluate_sequences(obs, actions, starts, pi, vf)
        flat = lambda x: tf.reshape(x, [-1])  # noqa: E731  the (t, e) order evaluate_sequences uses
        return ppo_objective(
            logp, entropy, values, flat(old_logp), flat(old_values), flat(adv), flat(returns), clip, cfg
        )

    return loss_fn


class TFRecurrentPPO:
    framework = "tf"
    policy_distribution = False  # --noise policy is not folded for stateful graphs (yet)

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """The actor's LSTM or GRU (numpy weights, exported as one cell) and its Dense chain."""
        from rl2edge.train.tf_backend.nets import DeployParts, dense_layers
        from rl2edge.train.tf_backend.recurrent_nets import TFRecurrentActorCritic

        model = TFRecurrentActorCritic(spec)
        load(model)
        return DeployParts(dense_layers(model.heads.actor), rnn=(model.kind, model.lstm_actor.numpy_layers()))

    def __init__(self, network: NetworkSpec, cfg: RecurrentPPOConfig, seed: int, device: str):
        self.device = configure_tensorflow(device)
        import keras
        import tensorflow as tf

        from rl2edge.train.tf_backend.recurrent_nets import TFRecurrentActorCritic

        self.tf, self.cfg = tf, cfg
        keras.utils.set_random_seed(seed)  # once, before the layers' initializers draw
        self.policy = TFRecurrentActorCritic(network, seed)
        self.layers, self.hidden = (
            int(network.required("n_lstm_layers")),
            int(network.required("lstm_hidden_size")),
        )
        self.state_parts = state_parts(self.policy.kind)
        self.optimizer = self.make_optimizer()
        self.loss_fn = self.make_loss_fn()
        discrete, obs_dim, act_dim = network.is_discrete, network.obs_dim, network.act_dim
        # [minibatches, T, E, ...]; the actor's and the critic's states, each a tuple of [minibatches, layers,
        # E, H] (an LSTM's h and c, a GRU's h)
        seq = lambda *tail, dtype=tf.float32: tf.TensorSpec([None, None, None, *tail], dtype)  # noqa: E731
        state = (tf.TensorSpec([None, self.layers, None, self.hidden], tf.float32),) * self.state_parts
        if network.action_nvec is not None:  # one index per component
            actions = seq(len(network.action_nvec), dtype=tf.int64)
        else:
            actions = seq(dtype=tf.int64) if discrete else seq(act_dim)
        self._train_many = tf.function(
            self._train_many_graph,
            jit_compile=True,
            input_signature=[seq(obs_dim), actions, seq(), seq(), seq(), seq(), seq(), state, state,
                             tf.TensorSpec([], tf.float32)],
        )  # fmt: skip

    def make_optimizer(self) -> Any:
        return adam(self.policy.trainable_variables, self.cfg.learning_rate(1.0))

    def make_loss_fn(self) -> Any:
        return make_loss_fn(self.policy, self.cfg)

    def _train_graph(
        self,
        obs: Any,
        actions: Any,
        old_logp: Any,
        old_values: Any,
        adv: Any,
        returns: Any,
        starts: Any,
        pi: Any,
        vf: Any,
        clip: Any,
    ) -> Any:
        tf = self.tf
        variables = self.policy.trainable_variables
        with tf.GradientTape() as tape:
            loss, stats = self.loss_fn(obs, actions, old_logp, old_values, adv, returns, starts, pi, vf, clip)
        grads = tape.gradient(loss, variables)
        grads, _ = tf.clip_by_global_norm(grads, self.cfg.max_grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return stats

    def _train_many_graph(self, *args: Any) -> Any:
        tf = self.tf
        *batched, clip = args
        n = tf.shape(batched[0])[0]
        stats = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            row = tf.nest.map_structure(lambda a, i=i: a[i], batched)
            stats = stats.write(i, self._train_graph(*row, clip))  # type: ignore[call-arg]  # the 9 tensors of a minibatch
        return tf.reduce_mean(stats.stack(), axis=0)

    # ----------------------------------------------------------------------------- the agent API
    @staticmethod
    def _states(mb: SequenceMinibatch) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """The minibatch's initial states of the actor and the critic; zeros where the critic has none."""
        pi = mb.actor_state
        return pi, mb.critic_state if mb.critic_state is not None else tuple(np.zeros_like(p) for p in pi)

    def loss(self, mb: SequenceMinibatch, clip: float) -> tuple[Any, Any]:
        """The loss and stats row, eagerly (tests)."""
        tf = self.tf
        cols = [tf.constant(getattr(mb, f)) for f in FIELDS]
        pi, vf = (tuple(tf.constant(p) for p in s) for s in self._states(mb))
        return self.loss_fn(*cols, pi, vf, tf.constant(np.float32(clip)))

    def train_minibatches(self, mbs: list[SequenceMinibatch], clip: float) -> np.ndarray:
        cols = [np.stack([getattr(mb, f) for mb in mbs]) for f in FIELDS]
        states = [self._states(mb) for mb in mbs]
        pi, vf = (
            tuple(np.stack(parts) for parts in zip(*(s[i] for s in states), strict=True)) for i in (0, 1)
        )
        return self._train_many(*cols, pi, vf, np.float32(clip)).numpy()

    def rollout_weights(self) -> RecurrentWeights:
        from rl2edge.train.tf_backend.nets import dense_layers

        p = self.policy
        layers = lambda seq: [(d.kernel.numpy(), d.bias.numpy()) for d in dense_layers(seq)]  # noqa: E731
        linear = None if p.critic_linear is None else layers(p.critic_linear)[0]
        return RecurrentWeights(
            p.lstm_actor.numpy_layers(),
            None if p.lstm_critic is None else p.lstm_critic.numpy_layers(),
            linear,
            layers(p.heads.actor),
            layers(p.heads.critic),
            None if p.discrete or p.heads.log_std is None else p.heads.log_std.numpy(),
        )

    def set_learning_rate(self, lr: float) -> None:
        self.optimizer.learning_rate.assign(lr)  # a variable: the graph reads it, no retrace

    def trace_counts(self) -> dict[str, int]:
        return {"train_many": self._train_many.experimental_get_tracing_count()}

    def get_state(self) -> list[np.ndarray]:
        return state_copy(self.policy)

    def set_state(self, state: list[np.ndarray]) -> None:
        self.policy.set_weights(state)

    def save_weights(self, run_dir: Path) -> str:
        return save_keras_weights(self.policy, run_dir)
