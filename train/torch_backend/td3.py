"""TD3 in torch (Fujimoto et al. 2018, SB3's variant): clipped double-Q critics, target policy smoothing,
and actor and target updates every `policy_delay` critic steps. DDPG is the same code with one critic,
no smoothing and no delay (train.core.offpolicy_config.DDPGConfig). Exploration noise is the driver's.

As in SAC (train.torch_backend.sac), the gradient step is written twice: `autograd_step` here, the
reference (read this one), and `written_out_step` (train.torch_backend.td3_written_out), the default, the
chain rule written out without an autograd graph; tests/test_offpolicy_grad.py holds the two within
float32 rounding."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_actor import Tanh
from rl2edge.train.core.offpolicy_config import TD3Config
from rl2edge.train.torch_backend.nets import Critics, TD3Actor, frozen, polyak_update
from rl2edge.train.torch_backend.offpolicy_base import TorchOffPolicyBase
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step
from rl2edge.train.torch_backend.td3_written_out import TD3WrittenOut


class TorchTD3(TD3WrittenOut, TorchOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss")

    @classmethod
    def deployable_actor(cls, spec: NetworkSpec, load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the tanh actor), built from the checkpoint's network spec and loaded by
        `load(module, prefix)` from the weights under "actor."."""
        actor = TD3Actor(spec)
        load(actor, "actor.")
        return actor

    def __init__(self, network: NetworkSpec, cfg: TD3Config, seed: int, device: str):
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
        # Image keys: the framework explores and autograd differentiates (as in TorchSAC).
        self.written_out = self.actor.encoder is None
        if self.written_out:
            self.explorer = self.numpy_explorer(network.activation, linears, Tanh())
            # The written-out gradient, the default; `autograd` True (tests set it) takes autograd_step.
            self.init_written_out(network.obs_dim)
        self.autograd = not self.written_out
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

    def _smoothing_noise(self, actions: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        noise = torch.randn_like(actions) * cfg.target_policy_noise
        return noise.clamp(-cfg.target_noise_clip, cfg.target_noise_clip)

    def _update_targets(self) -> None:
        polyak_update(self.critic.parameters(), self.critic_target.parameters(), self.cfg.tau)
        polyak_update(self.actor.parameters(), self.actor_target.parameters(), self.cfg.tau)

    def autograd_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
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
