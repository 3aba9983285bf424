"""PPO's TensorFlow side: the network, the clipped-surrogate loss and the optimizer step, as compiled
tf.functions with fixed input signatures. The driver is train.core.onpolicy_driver, shared with torch.

Graph discipline: every compiled function has an `input_signature` of tensors (None only for the batch
size, which really varies); nothing Python-valued that changes (clip range, learning rate) crosses into
a graph, only tensors and variables; hyperparameters fixed for the run are graph constants; counters
are tf.Variables; the sampling noise is an input (per-env numpy generators, train.core.rollout_collector). `trace_counts()` reports how
often each function traced, and tests assert once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.train.core.config import PPOConfig
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_policy import RolloutWeights
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.tf_backend.setup import configure_tensorflow
from rl2edge.train.tf_backend.weights import save_keras_weights, state_copy

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


def make_loss_fn(model: Any, cfg: PPOConfig) -> Any:
    """The PPO loss as a plain function of tensors (traced inside train_step; called eagerly in tests)."""

    def loss_fn(
        obs: Any, actions: Any, old_logp: Any, old_values: Any, adv: Any, returns: Any, clip: Any
    ) -> Any:
        out, values = model.outputs(obs)
        logp, entropy = model.log_prob_entropy(out, actions)
        return ppo_objective(logp, entropy, values, old_logp, old_values, adv, returns, clip, cfg)

    return loss_fn


def ppo_objective(
    logp: Any,
    entropy: Any,
    values: Any,
    old_logp: Any,
    old_values: Any,
    adv: Any,
    returns: Any,
    clip: Any,
    cfg: PPOConfig,
) -> Any:
    """PPO's loss and its stats row from per-sample log-probs, entropies and values: what every TF agent
    of the PPO family minimizes (recurrent PPO too, on its flattened sequences)."""
    import tensorflow as tf

    clip_vf = cfg.clip_range_vf
    log_ratio = logp - old_logp
    ratio = tf.exp(log_ratio)
    # The clipped surrogate is a min of two objectives, not clip_by_value(ratio) * adv.
    pg_loss = -tf.reduce_mean(tf.minimum(adv * ratio, adv * tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)))
    if clip_vf is not None:
        values = old_values + tf.clip_by_value(values - old_values, -clip_vf, clip_vf)
    v_loss = tf.reduce_mean(tf.square(returns - values))
    ent = tf.reduce_mean(entropy)
    loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
    kl = tf.reduce_mean((ratio - 1.0) - log_ratio)
    clip_frac = tf.reduce_mean(tf.cast(tf.abs(ratio - 1.0) > clip, tf.float32))
    return loss, tf.stack([pg_loss, v_loss, ent, kl, clip_frac])


def adam(variables: list[Any], learning_rate: float) -> Any:
    """PPO's optimizer: Keras's Adam with SB3's eps (1e-5), built for `variables` before any trace."""
    import keras

    optimizer = keras.optimizers.Adam(learning_rate=learning_rate, epsilon=1e-5)
    optimizer.build(variables)
    return optimizer


class TFPPO:
    framework = "tf"
    policy_distribution = True  # Box actions: the Gaussian of the actor's mean and the learned log std

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """What export's graph is built from: the actor's Dense chain and, Box actions, the
        state-independent log std as a constant; the actor-critic built from the checkpoint's network spec
        and loaded by `load(model)`."""
        from rl2edge.train.tf_backend.nets import DeployParts, TFActorCritic, dense_layers

        model = TFActorCritic.from_network_spec(spec)
        load(model)
        log_std = None if model.log_std is None else model.log_std.numpy().astype(np.float32)
        encoder = None if model.encoder is None else model.encoder.frozen()
        return DeployParts(dense_layers(model.actor), log_std_const=log_std, encoder_fn=encoder)

    def __init__(self, network: NetworkSpec, cfg: PPOConfig, seed: int, device: str):
        self.device = configure_tensorflow(device)
        import keras
        import tensorflow as tf

        from rl2edge.train.tf_backend.nets import TFActorCritic

        self.tf, self.cfg = tf, cfg
        keras.utils.set_random_seed(seed)  # once, before the layers' initializers draw
        self.policy = TFActorCritic.from_network_spec(network, seed)
        self.discrete, obs_dim, act_dim = network.is_discrete, network.obs_dim, network.act_dim
        self.optimizer = self.make_optimizer()
        self.updates = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="updates"
        )  # a counter in the graph
        self.loss_fn = self.make_loss_fn()
        obs_spec = tf.TensorSpec([None, obs_dim], tf.float32)
        if network.action_nvec is not None:  # one index per component
            act_spec = tf.TensorSpec([None, len(network.action_nvec)], tf.int64)
        else:
            act_spec = (
                tf.TensorSpec([None], tf.int64)
                if self.discrete
                else tf.TensorSpec([None, act_dim], tf.float32)
            )
        vec, scalar = tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.float32)
        noise_spec = tf.TensorSpec(
            [None, act_dim], tf.float32
        )  # per-env draws (train.core.rollout_collector)
        self._act = tf.function(
            self._act_graph, input_signature=[obs_spec, noise_spec], reduce_retracing=False
        )
        self._deterministic = tf.function(self._deterministic_graph, input_signature=[obs_spec])
        self._train_step = tf.function(
            self._train_graph, input_signature=[obs_spec, act_spec, vec, vec, vec, vec, scalar]
        )
        self._act_cf = self._act.get_concrete_function()
        self._deterministic_cf = self._deterministic.get_concrete_function()
        # All of an update's minibatches in one call, compiled with XLA: on a small net the per-call
        # overhead, not the arithmetic, is what costs (benchmarks/micro_costs.py: a TF call). Not with
        # an image encoder: there the convolutions are the cost, and XLA's CPU convolutions are several
        # times slower than the plain graph's oneDNN ones.
        stack = lambda spec: tf.TensorSpec([None, *spec.shape], spec.dtype)  # noqa: E731
        self._train_many = tf.function(
            self._train_many_graph,
            jit_compile=network.encoder is None,
            input_signature=[
                stack(obs_spec),
                stack(act_spec),
                stack(vec),
                stack(vec),
                stack(vec),
                stack(vec),
                scalar,
            ],
        )

    def make_optimizer(self) -> Any:
        return adam(self.policy.trainable_variables, self.cfg.learning_rate(1.0))

    def make_loss_fn(self) -> Any:
        return make_loss_fn(self.policy, self.cfg)

    # ---------------------------------------------------------------------------------- graphs
    def _act_graph(self, obs: Any, noise: Any) -> Any:
        # The sample's randomness is an input, drawn per env by the caller: Gumbel noise (argmax(logits + g)
        # samples the softmax) or standard normal, so that a split of the envs over workers samples the same.
        tf = self.tf
        out, value = self.policy.outputs(obs)
        if self.discrete:
            action = self.policy.argmax(out + noise)
        else:
            action = out + tf.exp(self.policy.log_std) * noise
        logp, _ = self.policy.log_prob_entropy(out, action)
        return action, logp, value

    def _deterministic_graph(self, obs: Any) -> Any:
        out = self.policy.actor_out(obs)
        return self.policy.argmax(out) if self.discrete else out

    def _train_graph(
        self, obs: Any, actions: Any, old_logp: Any, old_values: Any, adv: Any, returns: Any, clip: Any
    ) -> Any:
        tf = self.tf
        variables = self.policy.trainable_variables
        with tf.GradientTape() as tape:
            loss, stats = self.loss_fn(obs, actions, old_logp, old_values, adv, returns, clip)
        grads = tape.gradient(loss, variables)
        grads, _ = tf.clip_by_global_norm(grads, self.cfg.max_grad_norm)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        self.updates.assign_add(1)
        return stats

    def _train_many_graph(
        self, obs: Any, actions: Any, old_logp: Any, old_values: Any, adv: Any, returns: Any, clip: Any
    ) -> Any:
        tf = self.tf
        n = tf.shape(obs)[0]
        stats = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            stats = stats.write(
                i, self._train_graph(obs[i], actions[i], old_logp[i], old_values[i], adv[i], returns[i], clip)
            )
        return tf.reduce_mean(stats.stack(), axis=0)

    # ----------------------------------------------------------------------------- the agent API
    # The per-step calls go to the concrete functions: the same single trace, minus the signature matching
    # that tf.function does on every call (a third of the call's cost here).
    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        action, logp, value = self._act_cf(self.tf.constant(obs), self.tf.constant(noise))
        return action.numpy(), logp.numpy(), value.numpy()

    def rollout_weights(self) -> RolloutWeights:
        """The weights the rollout acts with (train.core.numpy_policy): Dense kernels are [in, out]."""
        from rl2edge.train.tf_backend.nets import dense_layers

        layers = lambda seq: [(d.kernel.numpy(), d.bias.numpy()) for d in dense_layers(seq)]  # noqa: E731
        p = self.policy
        log_std = None if p.log_std is None else p.log_std.numpy()
        encoder = None if p.encoder is None else p.encoder.numpy_weights()
        return RolloutWeights(layers(p.actor), layers(p.critic), log_std, encoder)

    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self._deterministic_cf(self.tf.constant(obs)).numpy()

    def set_learning_rate(self, lr: float) -> None:
        self.optimizer.learning_rate.assign(lr)  # a variable: the graph reads it, no retrace

    def train_step(self, mb: Minibatch, clip: float) -> Any:
        return self._train_step(
            mb.obs, mb.actions, mb.old_logprobs, mb.old_values, mb.advantages, mb.returns, np.float32(clip)
        )

    def train_minibatches(self, mbs: list[Minibatch], clip: float) -> np.ndarray:
        if len({mb.obs.shape[0] for mb in mbs}) != 1:  # uneven last minibatch: one call each
            return self.mean_stats([self.train_step(mb, clip) for mb in mbs])
        cols = [
            np.stack([getattr(mb, f) for mb in mbs])
            for f in ("obs", "actions", "old_logprobs", "old_values", "advantages", "returns")
        ]
        return self._train_many(*cols, np.float32(clip)).numpy()

    def mean_stats(self, rows: list[Any]) -> np.ndarray:
        return self.tf.reduce_mean(self.tf.stack(rows), axis=0).numpy()

    def trace_counts(self) -> dict[str, int]:
        return {
            name: fn.experimental_get_tracing_count()
            for name, fn in (
                ("act", self._act),
                ("deterministic", self._deterministic),
                ("train_step", self._train_step),
                ("train_many", self._train_many),
            )
        }

    def get_state(self) -> list[np.ndarray]:
        return state_copy(self.policy)

    def set_state(self, state: list[np.ndarray]) -> None:
        self.policy.set_weights(state)

    def save_weights(self, run_dir: Path) -> str:
        return save_keras_weights(self.policy, run_dir)
