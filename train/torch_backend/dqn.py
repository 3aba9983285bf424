"""DQN in torch (Mnih et al. 2015; double DQN, van Hasselt et al. 2016): Huber loss on the TD error,
a target network that the driver updates every `target_update_interval` env steps, gradient-norm
clipping. Epsilon-greedy exploration and the target period are train.core.dqn_hooks', shared with TF."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.dqn_hooks import DQNHooks
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.offpolicy_config import DQNConfig
from rl2edge.train.torch_backend.nets import QNetwork, polyak_update
from rl2edge.train.torch_backend.offpolicy_base import TorchOffPolicyBase
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


class TorchDQN(DQNHooks, TorchOffPolicyBase):
    stat_names = ("loss", "q_mean")
    network_class: type[nn.Module] = QNetwork  # Rainbow's agent builds its own Q-network here

    @classmethod
    def deployable_actor(cls, spec: NetworkSpec, load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the Q-network; its `forward` is the Q-values the argmax head takes), built from
        the checkpoint's network spec and loaded by `load(module, prefix)` from the weights under "q_net."."""
        q_net = cls.network_class(spec)
        load(q_net, "q_net.")
        return q_net

    def __init__(self, network: NetworkSpec, cfg: DQNConfig, seed: int, device: str):
        super().__init__(seed, device)
        self.cfg = cfg
        self.n_actions = int(network.act_dim)
        self.q_net = self.network_class(network).to(self.dev)
        self.q_target = copy.deepcopy(self.q_net).requires_grad_(False)
        self.nets.update(dict(q_net=self.q_net, q_target=self.q_target))
        self.opt = self.adam(list(self.q_net.parameters()), cfg.learning_rate(1.0))

    def parts(self) -> dict[str, nn.Module]:
        return {"q": self.q_net, "q_target": self.q_target}

    @torch.no_grad()
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.q_net(self._t(obs)).argmax(-1).cpu().numpy()

    framework_explore = deterministic  # epsilon-greedy: DQNHooks.act

    def update_target(self) -> None:
        polyak_update(self.q_net.parameters(), self.q_target.parameters(), self.cfg.tau)

    def train_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        cfg = self.cfg
        with torch.no_grad():
            next_q_all = self.q_target(next_obs)
            if cfg.double_q:  # the online net picks, the target net values
                next_a = self.q_net(next_obs).argmax(-1, keepdim=True)
                next_q = next_q_all.gather(-1, next_a).squeeze(-1)
            else:
                next_q = next_q_all.max(-1).values
            target_q = rewards + (1.0 - dones) * cfg.gamma * next_q
        q = self.q_net(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        # a mean of per-sample Huber terms: the same ops as Rainbow's importance-weighted loss at weight 1
        loss = nn.functional.smooth_l1_loss(q, target_q, reduction="none").mean()
        clear_grads(self.opt)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_net.parameters(), cfg.max_grad_norm)
        fused_adam_step(self.opt)
        return torch.stack([loss.detach(), q.detach().mean()])
