"""A2C's TensorFlow side, the twin of train.torch_backend.a2c: PPO's compiled functions (fixed input
signatures, one trace each, a whole update in one XLA call) with A2C's loss and PyTorch's RMSprop. The
loss is a mean over the whole rollout, never a sum over envs (no tf.add_n of per-env losses)."""

from __future__ import annotations

from typing import Any

from rl2edge.train.core.config import A2CConfig
from rl2edge.train.tf_backend.ppo import TFPPO

STAT_NAMES = ("policy_loss", "value_loss", "entropy")


def make_a2c_loss_fn(model: Any, cfg: A2CConfig) -> Any:
    """A2C's loss as a plain function of tensors, with PPO's loss signature (the unused inputs are the
    recorded log-probs and values, and the clip range: A2C's update needs neither)."""
    import tensorflow as tf

    def loss_fn(
        obs: Any, actions: Any, old_logp: Any, old_values: Any, adv: Any, returns: Any, clip: Any
    ) -> Any:
        out, values = model.outputs(obs)
        logp, entropy = model.log_prob_entropy(out, actions)
        pg_loss = -tf.reduce_mean(adv * logp)
        v_loss = tf.reduce_mean(tf.square(returns - values))
        ent = tf.reduce_mean(entropy)
        loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
        return loss, tf.stack([pg_loss, v_loss, ent])

    return loss_fn


def a2c_optimizer(variables: list[Any], cfg: A2CConfig) -> Any | None:
    """A2C's optimizer: PyTorch's RMSprop (as SB3's), or None where the config asks for Adam."""
    if not cfg.use_rms_prop:
        return None
    from rl2edge.train.tf_backend.rmsprop import TorchRMSprop

    return TorchRMSprop(variables, cfg.learning_rate(1.0), A2CConfig.RMSPROP_ALPHA, cfg.rms_prop_eps)


class TFA2C(TFPPO):
    stat_names = STAT_NAMES
    cfg: A2CConfig  # type: ignore[assignment]  # PPO's update fields are its class attributes (train.core.config)

    def make_optimizer(self) -> Any:
        rmsprop = a2c_optimizer(self.policy.trainable_variables, self.cfg)
        return rmsprop if rmsprop is not None else super().make_optimizer()

    def make_loss_fn(self) -> Any:
        return make_a2c_loss_fn(self.policy, self.cfg)
