"""Rainbow in TensorFlow, the twin of train.torch_backend.rainbow.

Graph discipline: the components are switched by the config, which is fixed for the run, so each switch
is resolved once when the functions trace (Python `if` on a constant of the run, never on a tensor or a
value that changes); every function has a fixed input signature and traces once (tests run all
components on); the noisy layers' noise is drawn inside the graph from the one seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.offpolicy_config import RainbowConfig
from rl2edge.train.core.rainbow_hooks import RainbowHooks
from rl2edge.train.core.replay import ReplayBatch
from rl2edge.train.tf_backend.dqn import TFDQN

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


class TFRainbow(RainbowHooks, TFDQN):
    """DQN's agent (nets and target, parts, the target update, greedy on the mean weights) with Rainbow's
    networks, noisy exploration, loss, and a train step that takes n-step discounts and importance
    weights and returns priorities."""

    cfg: RainbowConfig

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """What export's graph is built from: the expected Q over the atoms with the noisy layers' mean
        weights (not a Dense chain), the networks built from the checkpoint's network spec and loaded by
        `load(model)`."""
        from rl2edge.train.tf_backend.nets import DeployParts, RainbowNets

        nets = RainbowNets(spec)
        load(nets)
        return DeployParts([], actor_fn=nets.q_net.frozen_expected_q())

    def make_nets(self, network: NetworkSpec, seed: int) -> Any:
        from rl2edge.train.tf_backend.nets import RainbowNets

        self.noisy = bool(network.required("noisy"))
        return RainbowNets(network, seed)

    def compile(self, obs_dim: int, act_dim: int, discrete: bool) -> None:
        """DQN's functions, but one gradient step per call, with discounts and weights in, priorities out."""
        tf = self.tf
        obs = tf.TensorSpec([None, obs_dim], tf.float32)
        vec = tf.TensorSpec([None], tf.float32)
        self._deterministic = tf.function(self.deterministic_graph, input_signature=[obs])
        self._explore = tf.function(self.explore_graph, input_signature=[obs])
        self._update_target = tf.function(self.update_target_graph, input_signature=[])
        self._train_signature = [obs, tf.TensorSpec([None], tf.int64), vec, obs, vec, vec, vec]
        self._train_step = tf.function(self.train_step_graph, input_signature=self._train_signature)
        self._deterministic_cf = self._deterministic.get_concrete_function()
        self._explore_cf = self._explore.get_concrete_function()
        self._train_step_cf = self._train_step.get_concrete_function()

    def compile_update(self) -> None:
        """`train --compile`: each gradient step as one XLA computation (see TFOffPolicyBase)."""
        self._train_step = self.tf.function(
            self.train_step_graph, input_signature=self._train_signature, jit_compile=True
        )
        self._train_step_cf = self._train_step.get_concrete_function()

    # ------------------------------------------------------------------------------------ graphs
    def explore_graph(self, obs: Any) -> Any:
        q_net = self.nets.q_net
        return self.tf.argmax(q_net(obs, q_net.draw_noise(self.rng)), axis=-1)  # mean weights without noise

    def loss(
        self,
        obs: Any,
        actions: Any,
        rewards: Any,
        next_obs: Any,
        dones: Any,
        discounts: Any,
        weights: Any,
        online_noise: Any,
        target_noise: Any,
    ) -> Any:
        """(importance-weighted loss, per-sample priority, mean Q of the taken actions), as the torch twin."""
        from rl2edge.train.tf_backend.nets import project_distribution

        tf, cfg = self.tf, self.cfg
        q_net, q_target = self.nets.q_net, self.nets.q_target
        not_done_discount = (1.0 - dones) * discounts
        target_logits = q_target.logits(next_obs, target_noise)
        if cfg.double_q:
            next_a = tf.argmax(q_net(next_obs, online_noise), axis=-1)
        else:
            next_a = tf.argmax(q_target.expected_q(target_logits), axis=-1)
        next_logits = tf.gather(target_logits, next_a, batch_dims=1)  # [B, atoms]
        if cfg.distributional:
            target = project_distribution(
                tf.nn.softmax(next_logits, axis=-1), rewards, not_done_discount, q_target.support
            )
        else:
            target = rewards + not_done_discount * next_logits[:, 0]
        target = tf.stop_gradient(target)
        logits = tf.gather(q_net.logits(obs, online_noise), actions, batch_dims=1)
        if cfg.distributional:
            per_sample = -tf.reduce_sum(target * tf.nn.log_softmax(logits, axis=-1), axis=-1)
            priority = per_sample
            q = tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * q_net.support, axis=-1)
        else:
            q = logits[:, 0]
            per_sample = tf.keras.losses.huber(target[:, None], q[:, None])
            priority = tf.abs(target - q)
        return tf.reduce_mean(weights * per_sample), tf.stop_gradient(priority), tf.reduce_mean(q)

    def train_step_graph(  # type: ignore[override]  # with the n-step discounts and importance weights
        self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any, discounts: Any, weights: Any
    ) -> Any:
        tf = self.tf
        # fresh noise for each gradient step, online and target independently (None without noisy layers)
        online_noise = self.nets.q_net.draw_noise(self.rng)
        target_noise = self.nets.q_target.draw_noise(self.rng)
        with tf.GradientTape() as tape:
            loss, priority, q_mean = self.loss(
                obs, actions, rewards, next_obs, dones, discounts, weights, online_noise, target_noise
            )
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, self.q_vars), self.cfg.max_grad_norm)
        self.opt.apply_gradients(zip(grads, self.q_vars, strict=True))
        return tf.stack([loss, tf.stop_gradient(q_mean)]), priority

    # ---------------------------------------------------------------------------------- agent API
    def train_prioritized(self, batch: ReplayBatch) -> tuple[np.ndarray, np.ndarray]:
        """One gradient step per stacked batch; (mean stats, priorities [n, B])."""
        const = self.tf.constant
        assert batch.discounts is not None and batch.weights is not None  # a Rainbow buffer's batch
        stats, prios = [], []
        for i in range(batch.n):
            s, p = self._train_step_cf(
                const(batch.obs[i]),
                const(batch.actions[i]),
                const(batch.rewards[i]),
                const(batch.next_obs[i]),
                const(batch.dones[i]),
                const(batch.discounts[i]),
                const(batch.weights[i]),
            )
            stats.append(s.numpy())
            prios.append(p.numpy())
        return np.mean(stats, axis=0), np.stack(prios)

    def train(self, batch: ReplayBatch) -> np.ndarray:
        return self.train_prioritized(batch)[0]

    def compiled(self) -> dict[str, Any]:
        return {
            "deterministic": self._deterministic,
            "explore": self._explore,
            "train_step": self._train_step,
            "update_target": self._update_target,
        }
