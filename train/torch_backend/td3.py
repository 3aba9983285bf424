"""TD3 in torch (Fujimoto et al. 2018, SB3's variant): clipped double-Q critics, target policy smoothing,
and actor and target updates every `policy_delay` critic steps. DDPG is the same code with one critic,
no smoothing and no delay (train.core.offpolicy_config.DDPGConfig). Exploration noise is the driver's.

As in SAC (train.torch_backend.sac), the gradient step is written out twice: `autograd_step`, the
reference, and `written_out_step`, the default, the chain rule written out (train.torch_backend.mlp_grad)
without an autograd graph; tests/test_offpolicy_grad.py holds the two within float32 rounding."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.numpy_actor import Tanh
from rl2edge.train.core.offpolicy_config import TD3Config
from rl2edge.train.torch_backend.mlp_grad import CriticsGrad, MLPGrad, activation_of, ensure_grads
from rl2edge.train.torch_backend.nets import Critics, TD3Actor, frozen, polyak_update
from rl2edge.train.torch_backend.offpolicy_base import TorchOffPolicyBase
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


class TorchTD3(TorchOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss")

    @classmethod
    def deployable_actor(cls, spec: dict[str, Any], load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the tanh actor), built from the checkpoint's network spec and loaded by
        `load(module, prefix)` from the weights under "actor."."""
        actor = TD3Actor(spec)
        load(actor, "actor.")
        return actor

    def __init__(self, network: dict[str, Any], cfg: TD3Config, seed: int, device: str):
        super().__init__(seed, device)
        self.cfg = cfg
        self.actor = TD3Actor(network).to(self.dev)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = Critics(network, cfg.n_critics).to(self.dev)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.nets.update(
            dict(
                actor=self.actor,
                actor_target=self.actor_target,
                critic=self.critic,
                critic_target=self.critic_target,
            )
        )
        lr = cfg.learning_rate(1.0)
        self.actor_opt = self.adam(list(self.actor.parameters()), lr)
        self.critic_opt = self.adam(list(self.critic.parameters()), lr)
        self.n_updates = 0  # critic steps taken; the actor steps when it is a multiple of policy_delay
        linears = [m for m in self.actor.net if isinstance(m, nn.Linear)]
        self.explorer = self.numpy_explorer(network["activation"], linears, Tanh())
        # The written-out gradient, the default; `autograd` True (tests set it) takes autograd_step instead.
        activation = activation_of(self.actor.net, *self.critic.qs)
        self.actor_grad = MLPGrad(self.actor.net, activation)
        self.target_actor_grad = MLPGrad(self.actor_target.net, activation)
        self.critic_grad = CriticsGrad(self.critic, network["obs_dim"], activation)
        self.target_grad = CriticsGrad(self.critic_target, network["obs_dim"], activation)
        self.autograd = False
        # Each optimizer's step in the written-out update: the fused kernel, or (train --compile) the
        # graph's own Adam (TorchOffPolicyBase.compile_update)
        self.critic_opt_step: Callable[[], None] = partial(fused_adam_step, self.critic_opt)
        self.actor_opt_step: Callable[[], None] = partial(fused_adam_step, self.actor_opt)

    def parts(self) -> dict[str, nn.Module]:
        return {
            "actor": self.actor,
            "actor_target": self.actor_target,
            "critic": self.critic,
            "critic_target": self.critic_target,
        }

    @torch.no_grad()
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.actor(self._t(obs)).cpu().numpy()

    framework_explore = deterministic  # the driver adds the exploration noise

    def _compile(self) -> None:
        """Two graphs, as the policy delay splits the step: the critics' update, and the actor's with the
        target updates; which run is decided outside, on the Python counter."""
        self.critic_opt_step = self.graph_adam_step(self.critic_opt)
        self.actor_opt_step = self.graph_adam_step(self.actor_opt)
        self.critic_update = self.compiled_graph(self.critic_update)
        self.actor_update = self.compiled_graph(self.actor_update)
        self.autograd = False

    def train_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        if self.autograd:
            return self.autograd_step(obs, actions, rewards, next_obs, dones)
        return self.written_out_step(obs, actions, rewards, next_obs, dones)

    def _smoothing_noise(self, actions: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        noise = torch.randn_like(actions) * cfg.target_policy_noise
        return noise.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)

    def _update_targets(self) -> None:
        polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.cfg.tau)
        polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.cfg.tau)

    def autograd_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        cfg = self.cfg
        self.n_updates += 1
        with torch.no_grad():
            noise = self._smoothing_noise(actions)
            next_a = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            next_q = torch.stack(self.critic_target(next_obs, next_a)).min(0).values
            target_q = rewards + (1.0 - dones) * cfg.gamma * next_q
        critic_loss = sum(nn.functional.mse_loss(q, target_q) for q in self.critic(obs, actions))
        clear_grads(self.critic_opt)
        critic_loss.backward()
        fused_adam_step(self.critic_opt)

        actor_loss = torch.full((), float("nan"), device=self.dev)
        if self.n_updates % cfg.policy_delay == 0:
            with frozen(self.critic):
                actor_loss = -self.critic.first(obs, self.actor(obs)).mean()
            clear_grads(self.actor_opt)
            actor_loss.backward()
            fused_adam_step(self.actor_opt)
            self._update_targets()
        return torch.stack([actor_loss.detach(), critic_loss.detach()])

    def written_out_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        """autograd_step's update, the same draw, with the gradients written out."""
        self.n_updates += 1
        critic_loss = self.critic_update(obs, actions, rewards, next_obs, dones)
        if self.n_updates % self.cfg.policy_delay == 0:
            actor_loss = self.actor_update(obs)
        else:
            actor_loss = torch.full((), float("nan"), device=self.dev)
        return torch.stack([actor_loss, critic_loss])

    @torch.no_grad()
    def critic_update(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
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
