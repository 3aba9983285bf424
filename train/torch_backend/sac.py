"""SAC in torch (Haarnoja et al. 2018, SB3's variant): twin critics with polyak-averaged targets, a
squashed Gaussian actor, and an entropy temperature learned by its own optimizer, which owns log-alpha
and nothing else. The driver is train.core.offpolicy_driver, shared with TF.

The gradient step is written twice: `autograd_step` here, through autograd (the reference: read this one),
and `written_out_step` (train.torch_backend.sac_written_out), the default, the same arithmetic with the
chain rule written out and no autograd graph, which is faster on a CPU. tests/test_offpolicy_grad.py holds
the two within float32 rounding."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_actor import SquashedGaussian
from rl2edge.train.core.offpolicy_config import SACConfig
from rl2edge.train.torch_backend.nets import Critics, SACActor, frozen, polyak_update
from rl2edge.train.torch_backend.offpolicy_base import TorchOffPolicyBase
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step
from rl2edge.train.torch_backend.sac_written_out import SACWrittenOut


class TorchSAC(SACWrittenOut, TorchOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss", "ent_coef", "ent_coef_loss")
    policy_distribution = True  # its actor's squashed Gaussian (SACActor.mean_log_std)

    @classmethod
    def deployable_actor(cls, spec: NetworkSpec, load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the Gaussian's mean), built from the checkpoint's network spec and loaded by
        `load(module, prefix)` from the weights under "actor."."""
        actor = SACActor(spec)
        load(actor, "actor.")
        return actor

    def __init__(self, network: NetworkSpec, cfg: SACConfig, seed: int, device: str):
        super().__init__(seed, device)
        self.cfg = cfg
        self.actor = SACActor(network).to(self.dev)
        self.critic = Critics(network, 2).to(self.dev)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(cfg.ent_coef_init()), device=self.dev))
        self.nets.update(dict(actor=self.actor, critic=self.critic, critic_target=self.critic_target))
        self.nets.register_parameter("log_alpha", self.log_alpha)
        lr = cfg.learning_rate(1.0)
        self.actor_opt = self.adam(list(self.actor.parameters()), lr)
        self.critic_opt = self.adam(list(self.critic.parameters()), lr)
        # The temperature's optimizer owns log-alpha alone (tests check that it moves nothing else).
        self.alpha_opt = self.adam([self.log_alpha], lr) if cfg.learns_ent_coef() else None
        self.target_entropy = cfg.entropy_target(network.act_dim)
        self.gamma, self.tau = cfg.gamma, cfg.tau
        self.n_updates = 0
        a = self.actor
        linears = [m for m in a.latent if isinstance(m, nn.Linear)] + [a.mu, a.log_std]
        sample = SquashedGaussian(seed, network.required("log_std_min"), network.required("log_std_max"))
        # Image keys: the framework explores and autograd differentiates (a Nature-CNN has neither a numpy
        # copy here nor a written-out backward; its convolutions outweigh the per-op costs these avoid).
        self.written_out = a.encoder is None
        if self.written_out:
            self.explorer = self.numpy_explorer(network.activation, linears, sample)
            # The written-out gradient, the default; `autograd` True (tests set it) takes autograd_step.
            self.init_written_out(network.obs_dim)
        self.autograd = not self.written_out
        # Each optimizer's step in the written-out update: the fused kernel, or (train --compile) the
        # graph's own Adam (TorchOffPolicyBase.compile_update)
        self.critic_opt_step: Callable[[], None] = partial(fused_adam_step, self.critic_opt)
        self.actor_opt_step: Callable[[], None] = partial(fused_adam_step, self.actor_opt)
        if self.alpha_opt is not None:
            self.alpha_opt_step: Callable[[], None] = partial(fused_adam_step, self.alpha_opt)

    def parts(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _compile(self) -> None:
        """One graph: the whole gradient update, the three Adam steps included; the target update, on
        its interval, stays outside."""
        self.critic_opt_step = self.graph_adam_step(self.critic_opt)
        self.actor_opt_step = self.graph_adam_step(self.actor_opt)
        if self.alpha_opt is not None:
            self.alpha_opt_step = self.graph_adam_step(self.alpha_opt)
        self.gradient_update = self.compiled_graph(self.gradient_update)
        self.autograd = False

    @torch.no_grad()
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return torch.tanh(self.actor(self._t(obs))).cpu().numpy()

    @torch.no_grad()
    def framework_explore(self, obs: np.ndarray) -> np.ndarray:
        return self.actor.sample(self._t(obs))[0].cpu().numpy()

    def alpha_step(self, logp: torch.Tensor) -> torch.Tensor:
        """One step of the temperature: alpha's loss depends on the policy only through detached log-probs."""
        assert self.alpha_opt is not None
        loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        clear_grads(self.alpha_opt)
        loss.backward()
        fused_adam_step(self.alpha_opt)
        return loss.detach()

    def train_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        if self.autograd:
            return self.autograd_step(obs, actions, rewards, next_obs, dones)
        return self.written_out_step(obs, actions, rewards, next_obs, dones)

    def autograd_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        pi, logp = self.actor.sample(obs)
        alpha = self.log_alpha.detach().exp()  # the temperature before this step's update, as SB3
        alpha_loss = self.alpha_step(logp) if self.alpha_opt is not None else torch.zeros((), device=self.dev)

        with torch.no_grad():
            next_a, next_logp = self.actor.sample(next_obs)
            next_q = torch.min(*self.critic_target(next_obs, next_a)) - alpha * next_logp
            target_q = rewards + (1.0 - dones) * self.gamma * next_q
        critic_loss = 0.5 * sum(nn.functional.mse_loss(q, target_q) for q in self.critic(obs, actions))
        clear_grads(self.critic_opt)
        critic_loss.backward()
        fused_adam_step(self.critic_opt)

        with frozen(self.critic):
            actor_loss = (alpha * logp - torch.min(*self.critic(obs, pi))).mean()
        clear_grads(self.actor_opt)
        actor_loss.backward()
        fused_adam_step(self.actor_opt)

        self._update_targets()
        return torch.stack([actor_loss.detach(), critic_loss.detach(), alpha, alpha_loss])

    def _update_targets(self) -> None:
        self.n_updates += 1
        if self.n_updates % self.cfg.target_update_interval == 0:
            polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.tau)
