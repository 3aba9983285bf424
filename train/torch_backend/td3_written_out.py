"""TD3's (and DDPG's) gradient step with the chain rule written out (no autograd graph): the default step
of train.torch_backend.td3.TorchTD3, faster on a CPU. Read `TorchTD3.autograd_step` first: this is the
same update with the same draw, and tests/test_offpolicy_grad.py holds the two within float32 rounding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl2edge.train.torch_backend.mlp_grad import CriticsGrad, MLPGrad, activation_of, ensure_grads


class TD3WrittenOut:
    """Mixed into TorchTD3, whose actor, critics, their targets and optimizers it steps."""

    actor: Any
    actor_target: Any
    critic: Any
    critic_target: Any
    cfg: Any
    dev: torch.device
    n_updates: int
    critic_opt_step: Callable[[], None]
    actor_opt_step: Callable[[], None]
    _update_targets: Callable[[], None]
    _smoothing_noise: Callable[[torch.Tensor], torch.Tensor]

    def init_written_out(self, obs_dim: int) -> None:
        activation = activation_of(self.actor.net, *self.critic.qs)
        self.actor_grad = MLPGrad(self.actor.net, activation)
        self.target_actor_grad = MLPGrad(self.actor_target.net, activation)
        self.critic_grad = CriticsGrad(self.critic, obs_dim, activation)
        self.target_grad = CriticsGrad(self.critic_target, obs_dim, activation)

    def written_out_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        """autograd_step's update, the same draw, with the gradients written out."""
        self.n_updates += 1
        critic_loss = self.critic_update(obs, actions, rewards, next_obs, dones)
        if self.n_updates % self.cfg.policy_delay == 0:
            actor_loss = self.actor_update(obs)
        else:
            actor_loss = torch.full((), float("nan"), device=self.dev)
        return torch.stack([actor_loss, critic_loss])

    @torch.no_grad()
    def critic_update(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        """The critics' written-out gradient and optimizer step (a graph under train --compile)."""
        cfg, batch = self.cfg, obs.shape[0]
        noise = self._smoothing_noise(actions)
        next_a = (torch.tanh_(self.target_actor_grad.forward(next_obs)[0]) + noise).clamp(-1.0, 1.0)
        next_qs, _ = self.target_grad.forward(next_obs, next_a)
        next_q = next_qs[0] if len(next_qs) == 1 else torch.stack(next_qs).min(0).values
        target_q = rewards + (1.0 - dones) * cfg.gamma * next_q
        # loss sum_i mean((q_i - target)^2): d / d q_i = 2 (q_i - target) / B
        qs, inputs = self.critic_grad.forward(obs, actions)
        errors = [q - target_q for q in qs]
        critic_loss = sum(e.square().mean() for e in errors)
        ensure_grads(self.critic_grad.params)
        self.critic_grad.backward(inputs, [e * (2.0 / batch) for e in errors])
        self.critic_opt_step()
        return critic_loss

    @torch.no_grad()
    def actor_update(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's written-out gradient and optimizer step, then the target updates (a graph under
        train --compile): loss -mean(Q_1(obs, tanh(net(obs)))), through the critic just stepped, its
        weights untouched."""
        batch = obs.shape[0]
        out, actor_inputs = self.actor_grad.forward(obs)
        pi = torch.tanh_(out)
        (q1,), inputs = self.critic_grad.forward(obs, pi, n=1)
        actor_loss = -q1.mean()
        g_pi = self.critic_grad.action_grad(inputs, [torch.full_like(q1, -1.0 / batch)])
        ensure_grads(self.actor_grad.params)
        self.actor_grad.backward(actor_inputs, torch.ops.aten.tanh_backward(g_pi, pi))
        self.actor_opt_step()
        self._update_targets()
        return actor_loss
