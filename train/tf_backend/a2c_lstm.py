"""Recurrent A2C's TensorFlow side, the twin of train.torch_backend.a2c_lstm: recurrent PPO's compiled
update (fixed input signature, one trace, every minibatch in one XLA call) with A2C's loss over the
sequences and PyTorch's RMSprop."""

from __future__ import annotations

from typing import Any

from rl2edge.train.core.recurrent_config import RecurrentA2CConfig
from rl2edge.train.tf_backend.a2c import STAT_NAMES, a2c_optimizer
from rl2edge.train.tf_backend.ppo_lstm import TFRecurrentPPO


def make_a2c_lstm_loss_fn(model: Any, cfg: RecurrentA2CConfig) -> Any:
    """A2C's loss with recurrent PPO's loss signature (the recorded log-probs and values and the clip are
    unused: A2C's update needs none of them)."""
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
        adv, returns = tf.reshape(adv, [-1]), tf.reshape(returns, [-1])  # the (t, e) order of evaluate
        pg_loss = -tf.reduce_mean(adv * logp)
        v_loss = tf.reduce_mean(tf.square(returns - values))
        ent = tf.reduce_mean(entropy)
        return pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss, tf.stack([pg_loss, v_loss, ent])

    return loss_fn


class TFRecurrentA2C(TFRecurrentPPO):
    stat_names = STAT_NAMES
    cfg: RecurrentA2CConfig  # type: ignore[assignment]

    def make_optimizer(self) -> Any:
        rmsprop = a2c_optimizer(self.policy.trainable_variables, self.cfg)
        return rmsprop if rmsprop is not None else super().make_optimizer()

    def make_loss_fn(self) -> Any:
        return make_a2c_lstm_loss_fn(self.policy, self.cfg)
