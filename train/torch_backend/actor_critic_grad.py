"""The actor-critic's gradient written out: PPO's and A2C's update without autograd.

On nets this small, recording and walking autograd's graph costs more than the arithmetic
(benchmarks/train_throughput.py measures the trainers). `forward` runs both MLPs under no_grad, keeping
each layer's input; `backward` takes the loss's derivative per sample's log-prob, entropy and value
(ppo.ppo_grads, a2c.a2c_grads) and writes every `.grad` through the distribution's chain rule and, per
layer, W.grad = g^T h with aten's own tanh and ReLU backward kernels. Autograd (`TorchPPO.loss`, also the
path of `train --compile`) is the reference: tests/test_actor_critic_grad.py holds the two within float32
rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl2edge.train.torch_backend.mlp_grad import MLPGrad, activation_of, ensure_grads
from rl2edge.train.torch_backend.nets import ActionTerms, ActorCritic


@dataclass
class ForwardPass:
    """One forward pass over a minibatch: what the loss needs and what the backward reuses."""

    terms: ActionTerms  # log-prob and entropy per sample, with the distribution's intermediates
    values: torch.Tensor  # [B]
    actions: torch.Tensor
    actor_inputs: list[torch.Tensor]  # each actor layer's input: the observation, then hidden outputs
    critic_inputs: list[torch.Tensor]


class ActorCriticGrad:
    """Forward and backward of one ActorCritic's two MLPs; its parameters' `.grad` are written in place
    (allocated on first use), ready for gradient clipping and the optimizer step."""

    def __init__(self, policy: ActorCritic):
        if policy.encoder is not None:  # convolutions: their arithmetic outweighs autograd's per-op cost
            raise ValueError(
                "the network has an image encoder (a Nature-CNN), which has no written-out backward"
            )
        if policy.nvec is not None:  # one head per component: autograd differentiates its log-probs
            raise ValueError("a multi-discrete actor has no written-out backward")
        self.policy = policy
        activation = activation_of(policy.actor, policy.critic)  # one for both, as ActorCritic builds them
        self.actor = MLPGrad(policy.actor, activation)
        self.critic = MLPGrad(policy.critic, activation)
        self.params = list(policy.parameters())

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> ForwardPass:
        """evaluate_actions' values (the same ops: ActorCritic.action_terms) with the activations kept."""
        out, actor_inputs = self.actor.forward(obs)
        value, critic_inputs = self.critic.forward(obs)
        terms = self.policy.action_terms(out, actions)
        return ForwardPass(terms, value[:, 0], actions, actor_inputs, critic_inputs)

    @torch.no_grad()
    def backward(
        self, fwd: ForwardPass, g_logp: torch.Tensor, g_entropy: float, g_values: torch.Tensor
    ) -> None:
        """Write d loss / d parameter into every `.grad`, given d loss / d logp_i (`g_logp`, [B]),
        d loss / d entropy_i (the same for every sample in PPO's and A2C's mean: `g_entropy`) and
        d loss / d value_i (`g_values`, [B])."""
        ensure_grads(self.params)
        if fwd.terms.logp_all is not None:
            g_out = self._categorical_backward(fwd, g_logp, g_entropy)
        else:
            g_out = self._gaussian_backward(fwd, g_logp, g_entropy)
        self.actor.backward(fwd.actor_inputs, g_out)
        self.critic.backward(fwd.critic_inputs, g_values[:, None])

    @staticmethod
    def _categorical_backward(fwd: ForwardPass, g_logp: torch.Tensor, g_entropy: float) -> torch.Tensor:
        """d loss / d logits. logp_a = logits_a - logsumexp(logits), so d logp_a / d logits = onehot(a) - p;
        entropy = -sum p log p, so its gradient with respect to the log-softmax is -(p + p log p)."""
        logp_all = fwd.terms.logp_all
        assert logp_all is not None
        p = logp_all.exp()
        if g_entropy == 0.0:  # the log-softmax's backward, G - p * sum(G), for G = onehot(a) * g_logp
            g_out = p * -g_logp[:, None]
            return g_out.scatter_add_(-1, fwd.actions[:, None], g_logp[:, None])
        g = p * (1 + logp_all) * -g_entropy
        g.scatter_add_(-1, fwd.actions[:, None], g_logp[:, None])
        return g - p * g.sum(-1, keepdim=True)

    def _gaussian_backward(self, fwd: ForwardPass, g_logp: torch.Tensor, g_entropy: float) -> torch.Tensor:
        """d loss / d mean, and the log std's gradient. With z = (a - mean) / std:
        d logp / d mean = z / std, d logp / d log_std = z^2 - 1, d entropy / d log_std = 1."""
        z = fwd.terms.z
        assert z is not None
        gz = g_logp[:, None] * z
        log_std_grad = self.policy.log_std.grad
        assert log_std_grad is not None
        torch.sum(gz * z - g_logp[:, None], 0, out=log_std_grad)
        log_std_grad.add_(g_entropy * z.shape[0])
        return gz * torch.exp(-self.policy.log_std)
