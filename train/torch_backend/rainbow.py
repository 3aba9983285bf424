"""Rainbow in torch (Hessel et al. 2018): DQN with double Q, dueling heads, prioritized replay, n-step
returns, a C51 distributional head and noisy layers, each switched by RainbowConfig. The replay, the
n-step sums, the priorities' bookkeeping and the beta schedule are train.core's (rainbow_hooks.RainbowHooks.train_phase),
shared with TF; this module has the network's loss, the target and the gradient step.

Priorities: |TD error| without C51; with C51, the per-sample cross-entropy between the projected target
and the predicted distribution (the paper's KL up to the target's entropy, which has no gradient).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.offpolicy_config import RainbowConfig
from rl2edge.train.core.rainbow_hooks import RainbowHooks
from rl2edge.train.core.replay import ReplayBatch
from rl2edge.train.torch_backend.dqn import TorchDQN
from rl2edge.train.torch_backend.matmul_precision import training_phase
from rl2edge.train.torch_backend.nets import RainbowQNetwork, project_distribution
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step


class TorchRainbow(RainbowHooks, TorchDQN):
    """DQN's agent (networks and target, parts, the target update, greedy on the mean weights: the
    exported policy) with Rainbow's Q-network, noisy exploration and loss."""

    network_class = RainbowQNetwork
    q_net: RainbowQNetwork
    q_target: RainbowQNetwork

    def __init__(self, network: NetworkSpec, cfg: RainbowConfig, seed: int, device: str):
        super().__init__(network, cfg, seed, device)
        self.cfg: RainbowConfig = cfg
        self.noisy = bool(network.required("noisy"))

    @torch.no_grad()
    def framework_explore(self, obs: np.ndarray) -> np.ndarray:
        """Greedy on freshly drawn noise (the noisy nets' exploration); greedy on the mean without them."""
        if not self.noisy:
            return self.deterministic(obs)
        self.q_net.reset_noise()
        return self.q_net(self._t(obs), noisy=True).argmax(-1).cpu().numpy()

    def loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(importance-weighted loss, per-sample priority, mean Q of the taken actions)."""
        cfg, noisy = self.cfg, self.noisy
        not_done_discount = (1.0 - dones) * discounts
        with torch.no_grad():
            target_logits = self.q_target.logits(next_obs, noisy)
            if cfg.double_q:  # the online net picks, the target net values
                next_a = self.q_net(next_obs, noisy).argmax(-1)
            else:
                next_a = self.q_target.expected_q(target_logits).argmax(-1)
            next_logits = target_logits[torch.arange(len(next_a)), next_a]  # [B, atoms]
            if cfg.distributional:
                target = project_distribution(
                    next_logits.softmax(-1), rewards, not_done_discount, self.q_target.support
                )
            else:
                target = rewards + not_done_discount * next_logits.squeeze(-1)
        logits = self.q_net.logits(obs, noisy)[torch.arange(len(actions)), actions]  # [B, atoms]
        if cfg.distributional:
            per_sample = -(target * logits.log_softmax(-1)).sum(-1)
            priority = per_sample.detach()
            q = (logits.softmax(-1) * self.q_net.support).sum(-1)
        else:
            q = logits.squeeze(-1)
            per_sample = nn.functional.smooth_l1_loss(q, target, reduction="none")
            priority = (target - q).detach().abs()
        return (weights * per_sample).mean(), priority, q.detach().mean()

    def train_step(  # type: ignore[override]  # with the n-step discounts and importance weights
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
        discounts: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        if self.noisy:  # fresh noise for each gradient step, online and target independently
            self.q_net.reset_noise()
            self.q_target.reset_noise()
        loss, priority, q_mean = self.loss(obs, actions, rewards, next_obs, dones, discounts, weights)
        clear_grads(self.opt)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q_net.parameters(), self.cfg.max_grad_norm)
        fused_adam_step(self.opt)
        return torch.stack([loss.detach(), q_mean]), priority

    def train(self, batch: ReplayBatch) -> np.ndarray:
        return self.train_prioritized(batch)[0]

    def train_prioritized(self, batch: ReplayBatch) -> tuple[np.ndarray, np.ndarray]:
        """One gradient step per stacked batch; (mean stats, priorities [n, B]) in one host sync."""
        assert batch.discounts is not None and batch.weights is not None  # a Rainbow buffer's batch
        cols = (
            batch.obs,
            batch.actions,
            batch.rewards,
            batch.next_obs,
            batch.dones,
            batch.discounts,
            batch.weights,
        )
        t = [self._t(x) for x in cols]
        with training_phase(self.matmul_precision):  # subnormals flushed, the run's precision
            stats, prios = zip(*(self.train_step(*(x[i] for x in t)) for i in range(batch.n)), strict=True)
        return torch.stack(stats).mean(0).cpu().numpy(), torch.stack(prios).cpu().numpy()
