"""SAC's gradient step with the chain rule written out (no autograd graph): the default step of
train.torch_backend.sac.TorchSAC, faster on a CPU (benchmarks/train_throughput.py and its roofline measure
it). Read `TorchSAC.autograd_step` first: this is the same update, the same draws in the same order, and
tests/test_offpolicy_grad.py holds the two within float32 rounding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rl2edge.train.torch_backend.mlp_grad import CriticsGrad, MLPGrad, activation_of, ensure_grads


class SACWrittenOut:
    """Mixed into TorchSAC, whose actor, critics, optimizers and temperature it steps."""

    actor: Any
    critic: Any
    critic_target: Any
    log_alpha: nn.Parameter
    alpha_opt: Any
    target_entropy: float
    gamma: float
    dev: torch.device
    critic_opt_step: Callable[[], None]
    actor_opt_step: Callable[[], None]
    alpha_opt_step: Callable[[], None]
    _update_targets: Callable[[], None]

    def init_written_out(self, obs_dim: int) -> None:
        activation = activation_of(self.actor.latent, *self.critic.qs)
        self.actor_grad = MLPGrad(self.actor.latent, activation)
        self.critic_grad = CriticsGrad(self.critic, obs_dim, activation)
        self.target_grad = CriticsGrad(self.critic_target, obs_dim, activation)
        self.actor_params = list(self.actor.parameters())

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

    def written_out_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        """autograd_step's update, the same draws in the same order, with the gradients written out."""
        stats = self.gradient_update(obs, actions, rewards, next_obs, dones)
        self._update_targets()
        return stats

    @torch.no_grad()
    def gradient_update(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
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
