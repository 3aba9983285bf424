"""The actor-critic's gradient written out: PPO's and A2C's update without autograd.

Why: PPO's CartPole preset takes 7820 gradient steps of two 64-wide MLPs on minibatches of 256, and
there autograd's bookkeeping (recording the graph, then walking it: some 90 ops per step, each paying
torch's dispatch) cost more than the arithmetic. Timed by hand on one core of an AVX-512 Xeon: the loss,
backward, clip and Adam step took 975-1088 us per gradient step through autograd and 600-660 us this way.

`forward` runs both MLPs under no_grad, keeping each layer's input (the backward needs them), and the
distribution's terms; `backward` takes the loss's derivative with respect to each sample's log-prob,
entropy and value and writes every parameter's `.grad`: the chain rule through the distribution (the
categorical's log-softmax and gather, or the diagonal Gaussian's density), then per layer from the head
down W.grad = g^T h, b.grad = sum(g), g = act'(g W), with the backward kernels autograd itself calls for
tanh and ReLU (aten::tanh_backward, aten::threshold_backward). The gradient of each algorithm's own loss
with respect to log-prob, entropy and value is in its module (ppo.ppo_grads, a2c.a2c_grads).

It covers every network ActorCritic builds (MLPs, tanh or ReLU, categorical or diagonal Gaussian with a
state-independent log std). Autograd stays the reference: `TorchPPO.loss` is the same loss for
`train --compile` and for tests/test_actor_critic_grad.py, which holds the two within float32 rounding.
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
