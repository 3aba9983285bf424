"""Recurrent A2C's torch side: recurrent PPO's actor-critic (LSTM or GRU), rollout and sequence replay
(train.torch_backend.ppo_lstm), A2C's plain policy-gradient loss (train.torch_backend.a2c) as a mean over
every step of the rollout, and RMSprop. The driver is train.core.onpolicy_driver."""

from __future__ import annotations

import torch

from rl2edge.train.core.config import A2CConfig
from rl2edge.train.core.recurrent_config import RecurrentA2CConfig
from rl2edge.train.core.recurrent_rollout import SequenceMinibatch
from rl2edge.train.torch_backend.a2c import STAT_NAMES, a2c_loss
from rl2edge.train.torch_backend.ppo_lstm import TorchRecurrentPPO


class TorchRecurrentA2C(TorchRecurrentPPO):
    stat_names = STAT_NAMES
    cfg: RecurrentA2CConfig  # type: ignore[assignment]

    def make_optimizer(self) -> torch.optim.Optimizer:
        if not self.cfg.use_rms_prop:
            return super().make_optimizer()
        return torch.optim.RMSprop(
            self.params,
            lr=self.cfg.learning_rate(1.0),
            alpha=A2CConfig.RMSPROP_ALPHA,
            eps=self.cfg.rms_prop_eps,
            weight_decay=0.0,
        )

    def loss(self, mb: SequenceMinibatch, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
        """A2C's loss over the minibatch's steps (the clip is unused: A2C has none)."""
        logp, entropy, values = self.evaluate(mb)
        flat = lambda a: self._t(a.reshape(-1))  # noqa: E731  [T, E] -> [T * E], the order evaluate uses
        loss, pg_loss, v_loss, ent = a2c_loss(
            logp, entropy, values, flat(mb.advantages), flat(mb.returns), self.cfg
        )
        return loss, torch.stack([pg_loss, v_loss, ent]).detach()
