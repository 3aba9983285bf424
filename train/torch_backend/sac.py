"""SAC in torch (Haarnoja et al. 2018, SB3's variant): twin critics with polyak-averaged targets, a
squashed Gaussian actor, and an entropy temperature learned by its own optimizer, which owns log-alpha
and nothing else. The driver is train.core.offpolicy_driver, shared with TF.

The gradient step is written out twice: `autograd_step` through autograd (the reference), and
`written_out_step`, the default, the same arithmetic with the chain rule written out
(train.torch_backend.mlp_grad) and no autograd graph, which is faster on a CPU (benchmarks/train_throughput.py
and its roofline measure the step). tests/test_offpolicy_grad.py holds the two within float32 rounding."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.numpy_actor import SquashedGaussian
from rl2edge.train.core.offpolicy_config import SACConfig
from rl2edge.train.torch_backend.mlp_grad import CriticsGrad, MLPGrad, activation_of, ensure_grads
from rl2edge.train.torch_backend.nets import Critics, SACActor, frozen, polyak_update
from rl2edge.train.torch_backend.offpolicy_base import TorchOffPolicyBase
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


class TorchSAC(TorchOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss", "ent_coef", "ent_coef_loss")
    policy_distribution = True  # its actor's squashed Gaussian (SACActor.mean_log_std)

    @classmethod
    def deployable_actor(cls, spec: dict[str, Any], load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the Gaussian's mean), built from the checkpoint's network spec and loaded by
        `load(module, prefix)` from the weights under "actor."."""
        actor = SACActor(spec)
        load(actor, "actor.")
        return actor

    def __init__(self, network: dict[str, Any], cfg: SACConfig, seed: int, device: str):
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
        self.target_entropy = cfg.entropy_target(network["act_dim"])
        self.gamma, self.tau = cfg.gamma, cfg.tau
        self.n_updates = 0
        a = self.actor
        linears = [m for m in a.latent if isinstance(m, nn.Linear)] + [a.mu, a.log_std]
        sample = SquashedGaussian(seed, network["log_std_min"], network["log_std_max"])
        self.explorer = self.numpy_explorer(network["activation"], linears, sample)
        # The written-out gradient, the default; `autograd` True (tests set it) takes autograd_step instead.
        activation = activation_of(self.actor.latent, *self.critic.qs)
        self.actor_grad = MLPGrad(self.actor.latent, activation)
        self.critic_grad = CriticsGrad(self.critic, network["obs_dim"], activation)
        self.target_grad = CriticsGrad(self.critic_target, network["obs_dim"], activation)
        self.actor_params = list(self.actor.parameters())
        self.autograd = False
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

    def train_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        if self.autograd:
            return self.autograd_step(obs, actions, rewards, next_obs, dones)
        return self.written_out_step(obs, actions, rewards, next_obs, dones)

    def autograd_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
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

    # ----------------------------------------------------------------------- the written-out step
    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple]:
        """SACActor.sample (the same ops, the same draw), keeping what the backward needs: the trunk's
        layer inputs, the log std before its clamp, the std and the noise."""
        a = self.actor
        h, inputs = self.actor_grad.forward(obs)
        mean = torch.addmm(a.mu.bias, h, a.mu.weight.t())
        raw_log_std = torch.addmm(a.log_std.bias, h, a.log_std.weight.t())
        pi, logp, std, eps = a.squash(mean, raw_log_std.clamp(a.log_std_min, a.log_std_max))
        return pi, logp, (inputs, raw_log_std, std, eps)

    def _actor_backward(
        self, pi: torch.Tensor, g_pi: torch.Tensor, g_logp: torch.Tensor, saved: tuple
    ) -> None:
        """The actor's `.grad` for d loss / d pi (`g_pi`, [B, A]) and d loss / d logp (`g_logp`, [B]).
        logp = sum(-eps^2/2 - log_std - log(2 pi)/2) - sum(log(1 - pi^2 + 1e-6)), pi = tanh(mean + std eps)
        with eps fixed (the reparameterization): d logp / d pi = 2 pi / (1 - pi^2 + 1e-6) and
        d logp / d log_std = -1 besides the path through pi; tanh' = 1 - pi^2; d pre / d log_std = std eps;
        the clamp passes the log std's gradient where its input is within the bounds, ends included."""
        a = self.actor
        inputs, raw_log_std, std, eps = saved
        g_logp = g_logp[:, None]
        g_pi = g_pi + g_logp * 2.0 * pi / (1.0 - pi.square() + 1e-6)
        g_pre = torch.ops.aten.tanh_backward(g_pi, pi)  # d loss / d mean
        inside = (raw_log_std >= a.log_std_min) & (raw_log_std <= a.log_std_max)
        g_log_std = (g_pre * std * eps - g_logp) * inside
        h = inputs[-1]
        for layer, g in ((a.mu, g_pre), (a.log_std, g_log_std)):
            torch.mm(g.t(), h, out=layer.weight.grad)
            torch.sum(g, 0, out=layer.bias.grad)
        g_h = torch.addmm(torch.mm(g_log_std, a.log_std.weight), g_pre, a.mu.weight)
        self.actor_grad.backward(inputs, g_h)

    def written_out_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        """autograd_step's update, the same draws in the same order, with the gradients written out."""
        stats = self.gradient_update(obs, actions, rewards, next_obs, dones)
        self._update_targets()
        return stats

    @torch.no_grad()
    def gradient_update(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        """The written-out step's gradients and optimizer steps (a graph under train --compile)."""
        batch = obs.shape[0]
        pi, logp, saved = self._sample(obs)
        alpha = self.log_alpha.detach().exp()  # the temperature before this step's update, as SB3
        alpha_loss = torch.zeros((), device=self.dev)
        if self.alpha_opt is not None:  # loss -mean(log_alpha (logp + target)): its gradient is -mean(...)
            shifted = logp + self.target_entropy
            alpha_loss = -(self.log_alpha.detach() * shifted).mean()
            ensure_grads([self.log_alpha])
            torch.mean(shifted, 0, out=self.log_alpha.grad).neg_()
            self.alpha_opt_step()

        next_a, next_logp, _ = self._sample(next_obs)
        next_qs, _ = self.target_grad.forward(next_obs, next_a)
        next_q = torch.min(*next_qs) - alpha * next_logp
        target_q = rewards + (1.0 - dones) * self.gamma * next_q
        # loss 0.5 sum_i mean((q_i - target)^2): d / d q_i = (q_i - target) / B
        qs, inputs = self.critic_grad.forward(obs, actions)
        errors = [q - target_q for q in qs]
        critic_loss = 0.5 * sum(e.square().mean() for e in errors)
        ensure_grads(self.critic_grad.params)
        self.critic_grad.backward(inputs, [e / batch for e in errors])
        self.critic_opt_step()

        # loss mean(alpha logp - min(q1, q2)) through the critics just stepped (their weights untouched):
        # torch.min's gradient goes to the smaller, half to each on a tie, as autograd gives it.
        (q1, q2), inputs = self.critic_grad.forward(obs, pi)
        actor_loss = (alpha * logp - torch.min(q1, q2)).mean()
        to_q1 = (q1 < q2).to(q1.dtype) + 0.5 * (q1 == q2).to(q1.dtype)
        g_pi = self.critic_grad.action_grad(inputs, [to_q1 * (-1.0 / batch), (to_q1 - 1.0) / batch])
        ensure_grads(self.actor_params)
        self._actor_backward(pi, g_pi, (alpha / batch).expand(batch), saved)
        self.actor_opt_step()
        return torch.stack([actor_loss, critic_loss, alpha, alpha_loss])
