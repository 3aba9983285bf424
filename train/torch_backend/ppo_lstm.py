"""Recurrent PPO's torch side: the recurrent (LSTM or GRU) actor-critic (train.torch_backend.recurrent_nets), PPO's clipped
loss over whole env sequences, the optimizer step. The driver is train.core.onpolicy_driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.recurrent_config import RecurrentPPOConfig
from rl2edge.train.core.recurrent_rollout import RecurrentWeights, SequenceMinibatch
from rl2edge.train.torch_backend.matmul_precision import training_phase
from rl2edge.train.torch_backend.nets import clip_grad_norm
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step
from rl2edge.train.torch_backend.ppo import ppo_loss, ppo_stats
from rl2edge.train.torch_backend.recurrent_nets import RecurrentActorCritic, cell_actor, rnn_layers_numpy
from rl2edge.train.torch_backend.setup import setup_torch
from rl2edge.train.torch_backend.weights import save_safetensors, state_copy


def cuts_of(starts: np.ndarray) -> list[int]:
    """The steps t >= 1 at which some env of a [T, E] minibatch starts an episode."""
    return [int(t) for t in np.flatnonzero(starts[1:].any(axis=1)) + 1]


class TorchRecurrentPPO:
    matmul_precision = "highest"
    framework = "torch"
    policy_distribution = False  # --noise policy is not folded for stateful graphs (yet)

    @classmethod
    def deployable_actor(cls, spec: NetworkSpec, load: Callable[[nn.Module, str], None]) -> nn.Module:
        """One step of the actor's LSTM or GRU as gate arithmetic, then its MLP (LSTMCellActor, GRUCellActor)."""
        net = RecurrentActorCritic(spec)
        load(net, "")
        return cell_actor(net).eval()

    def __init__(self, network: NetworkSpec, cfg: RecurrentPPOConfig, seed: int, device: str):
        dev = setup_torch(seed, device)
        self.cfg, self.dev, self.device = cfg, dev, str(dev)
        self.policy = RecurrentActorCritic(network).to(dev)
        self.params = list(self.policy.parameters())
        self.optimizer = self.make_optimizer()
        self.grad_sync: Callable[[list[torch.Tensor]], None] | None = None  # as TorchPPO's

    def make_optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.params, lr=self.cfg.learning_rate(1.0), eps=1e-5, fused=True)

    def _t(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.dev)

    def rollout_weights(self) -> RecurrentWeights:
        """The weights the rollout and the periodic evaluation act with (train.core.recurrent_rollout)."""
        p = self.policy
        dense = lambda seq: [  # noqa: E731
            (m.weight.detach().cpu().numpy().T, m.bias.detach().cpu().numpy())
            for m in seq
            if isinstance(m, nn.Linear)
        ]
        linear = p.critic_linear
        return RecurrentWeights(
            rnn_layers_numpy(p.lstm_actor),
            None if p.lstm_critic is None else rnn_layers_numpy(p.lstm_critic),
            None
            if linear is None
            else (linear.weight.detach().cpu().numpy().T, linear.bias.detach().cpu().numpy()),
            dense(p.heads.actor),
            dense(p.heads.critic),
            None if p.discrete else p.heads.log_std.detach().cpu().numpy(),
        )

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def evaluate(self, mb: SequenceMinibatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The minibatch's log-probs, entropies and values, [T * E] each, replayed from its states."""
        state = lambda s: None if s is None else tuple(self._t(p) for p in s)  # noqa: E731
        pi = state(mb.actor_state)
        assert pi is not None
        return self.policy.evaluate_sequences(
            self._t(mb.obs),
            self._t(mb.actions),
            self._t(mb.starts),
            cuts_of(mb.starts),
            pi,
            state(mb.critic_state),
        )

    def loss(self, mb: SequenceMinibatch, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
        logp, entropy, values = self.evaluate(mb)
        flat = lambda a: self._t(a.reshape(-1))  # noqa: E731  [T, E] -> [T * E], the order evaluate uses
        loss, pg_loss, v_loss, ent, ratio, log_ratio = ppo_loss(
            logp, entropy, values, flat(mb.old_logprobs), flat(mb.old_values), flat(mb.advantages),
            flat(mb.returns), clip, self.cfg,
        )  # fmt: skip
        with torch.no_grad():
            stats = ppo_stats(pg_loss, v_loss, ent, ratio, log_ratio, clip)
        return loss, stats

    def train_minibatches(self, mbs: list[SequenceMinibatch], clip: float) -> np.ndarray:
        rows = []
        with training_phase(self.matmul_precision):
            for mb in mbs:
                loss, stats = self.loss(mb, clip)
                clear_grads(self.optimizer)
                loss.backward()
                if self.grad_sync is not None:
                    self.grad_sync(self.params)
                clip_grad_norm(self.params, self.cfg.max_grad_norm)
                fused_adam_step(self.optimizer)
                rows.append(stats)
        return torch.stack(rows).mean(0).cpu().numpy()

    def get_state(self) -> dict[str, torch.Tensor]:
        return state_copy(self.policy)

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        self.policy.load_state_dict(state)

    def save_weights(self, run_dir: Path) -> str:
        return save_safetensors(self.policy, run_dir)
