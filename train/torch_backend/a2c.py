"""A2C's torch side (Mnih et al. 2016, as SB3 runs it): PPO's network and rollout machinery (log-probs
and values recorded while acting), the plain policy-gradient loss, and RMSprop. The loss is a mean over
every transition of the rollout (all envs, all steps), never a sum over envs: the gradient's scale, and
so the learning rate's meaning, does not depend on n_envs."""

from __future__ import annotations

import torch
from torch import nn

from rl2edge.train.core.config import A2CConfig
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.torch_backend.actor_critic_grad import ForwardPass
from rl2edge.train.torch_backend.ppo import TorchPPO

STAT_NAMES = ("policy_loss", "value_loss", "entropy")


def a2c_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor,
    cfg: A2CConfig,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, policy loss, value loss, mean entropy), each a mean over the batch. a2c_grads writes out
    its derivative, so a change here goes there too (tests/test_actor_critic_grad.py compares them)."""
    pg_loss = -(adv * logp).mean()
    v_loss = nn.functional.mse_loss(returns, values)
    ent = entropy.mean()
    return pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss, pg_loss, v_loss, ent


def a2c_grads(
    fwd: ForwardPass, adv: torch.Tensor, returns: torch.Tensor, cfg: A2CConfig
) -> tuple[tuple[torch.Tensor, float, torch.Tensor], torch.Tensor]:
    """a2c_loss's derivatives with respect to each sample's log-prob, entropy and value, for
    ActorCriticGrad.backward, and the stats row (policy loss, value loss, entropy)."""
    n = fwd.terms.logp.shape[0]
    diff = fwd.values - returns
    stats = torch.stack([-(adv * fwd.terms.logp).mean(), diff.square().mean(), fwd.terms.entropy.mean()])
    return (adv * (-1.0 / n), -cfg.ent_coef / n, diff * (2.0 * cfg.vf_coef / n)), stats


class TorchA2C(TorchPPO):
    stat_names = STAT_NAMES
    cfg: A2CConfig  # type: ignore[assignment]  # PPO's update fields are its class attributes (train.core.config)

    def make_optimizer(self) -> torch.optim.Optimizer:
        if not self.cfg.use_rms_prop:
            return super().make_optimizer()
        return torch.optim.RMSprop(
            self.policy.parameters(),
            lr=self.cfg.learning_rate(1.0),
            alpha=A2CConfig.RMSPROP_ALPHA,
            eps=self.cfg.rms_prop_eps,
            weight_decay=0.0,
        )

    def loss(self, mb: Minibatch, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
        return self._loss_tensors(
            self._t(mb.obs), self._t(mb.actions), self._t(mb.advantages), self._t(mb.returns)
        )

    @torch.no_grad()
    def written_out_grads(self, mb: Minibatch, clip: float) -> torch.Tensor:
        assert self.backprop is not None, "this network trains through autograd (self.autograd)"
        fwd = self.backprop.forward(self._t(mb.obs), self._t(mb.actions))
        grads, stats = a2c_grads(fwd, self._t(mb.advantages), self._t(mb.returns), self.cfg)
        self.backprop.backward(fwd, *grads)
        return stats

    def _loss_tensors(  # type: ignore[override]  # A2C's loss takes no rollout log-probs, values or clip
        self, obs: torch.Tensor, actions: torch.Tensor, adv: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logp, entropy, values = self.policy.evaluate_actions(obs, actions)
        loss, pg_loss, v_loss, ent = a2c_loss(logp, entropy, values, adv, returns, self.cfg)
        return loss, torch.stack([pg_loss, v_loss, ent]).detach()
