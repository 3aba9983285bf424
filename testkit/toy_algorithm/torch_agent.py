"""Expected SARSA in torch: DQN's agent with the expected target (testkit.toy_algorithm)."""

from __future__ import annotations

import torch
from torch import nn

from rl2edge.train.torch_backend.dqn import TorchDQN
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


class TorchExpectedSarsa(TorchDQN):
    def train_step(self, obs, actions, rewards, next_obs, dones) -> torch.Tensor:
        cfg = self.cfg
        w_max, w_mean = cfg.target_weights()
        with torch.no_grad():
            next_q_all = self.q_target(next_obs)
            next_q = w_max * next_q_all.max(-1).values + w_mean * next_q_all.mean(-1)
            target_q = rewards + (1.0 - dones) * cfg.gamma * next_q
        q = self.q_net(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        loss = nn.functional.smooth_l1_loss(q, target_q)
        clear_grads(self.opt)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_net.parameters(), cfg.max_grad_norm)
        fused_adam_step(self.opt)
        return torch.stack([loss.detach(), q.detach().mean()])
