"""One MLP's forward and backward written out, without autograd: what the written-out gradients of PPO
and A2C (train.torch_backend.actor_critic_grad) and of SAC and TD3 (their modules' `written_out_step`)
are built from.

Why: a gradient step of these small nets is some hundred ops, and recording autograd's graph and walking
it costs a large share of the step. Written out, the forward keeps each layer's input (the backward needs
it) and the backward writes, per layer from the top down, W.grad = g^T h and b.grad = sum(g) into the
parameters' own `.grad` tensors (allocated once, reused), then g = act'(g W) with the backward kernels
autograd itself calls for tanh and ReLU (aten::tanh_backward, aten::threshold_backward), so each
gradient has autograd's values within float32 rounding (the tests hold them to it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

_aten = torch.ops.aten
Op = Callable[..., torch.Tensor]
# Each activation in place (the forward applies it to addmm's fresh output) and its backward
# g * act'(x), computed from the output h as autograd computes it.
_WITH_BACKWARD: dict[type[nn.Module], tuple[Op, Op]] = {
    nn.Tanh: (torch.tanh_, lambda g, h: _aten.tanh_backward(g, h)),  # g * (1 - h^2)
    nn.ReLU: (torch.relu_, lambda g, h: _aten.threshold_backward(g, h, 0)),  # g where h > 0
}


def activation_of(*seqs: nn.Sequential) -> type[nn.Module]:
    """The one activation class of `seqs` (Tanh where they have no hidden layer); ValueError for another
    activation or for a mix, which the written-out gradient does not cover."""
    acts = {type(m) for seq in seqs for m in seq if not isinstance(m, nn.Linear)}
    if len(acts) > 1 or not acts <= set(_WITH_BACKWARD):
        raise ValueError(f"no written-out gradient for activations {sorted(a.__name__ for a in acts)}")
    return acts.pop() if acts else nn.Tanh


def ensure_grads(params: list[nn.Parameter]) -> None:
    """Give every parameter without one a `.grad` to write into: zeros, not empty, so that on the first step
    a gradient the backward failed to write is zero, not garbage (on later steps it would be the previous
    step's: tests/test_offpolicy_grad.py fills every gradient with NaN before a step to catch that)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


class MLPGrad:
    """Forward and backward of one `nets.mlp` Sequential: Linear, activation, ..., Linear, optionally
    ending in an activation (SAC's actor trunk). `forward` returns the output and each layer's input;
    `backward` writes every layer's `.grad` (see ensure_grads); `input_grad` gives d output / d input
    alone, for a loss that passes through a network it does not train (the actor's loss through the
    critics), without any weight gradient."""

    def __init__(self, seq: nn.Sequential, activation: type[nn.Module] | None = None):
        layers = list(seq)
        self.linears = [m for m in layers if isinstance(m, nn.Linear)]
        n = len(self.linears)
        # Linear, activation, Linear, ..., Linear [, activation]: what nets.mlp builds
        if not self.linears or layers[::2] != self.linears or len(layers) not in (2 * n - 1, 2 * n):
            raise ValueError(f"expected alternating Linear and activation layers, got {seq}")
        self.activate_last = len(layers) == 2 * n
        self.act, self.act_backward = _WITH_BACKWARD[activation or activation_of(seq)]
        self.params: list[nn.Parameter] = [p for m in self.linears for p in (m.weight, m.bias)]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The output and the inputs the backward needs: each layer's input, then (when the MLP ends in
        an activation) the output itself."""
        inputs = [x]
        last = len(self.linears) - 1
        for i, layer in enumerate(self.linears):
            x = torch.addmm(layer.bias, x, layer.weight.t())
            if i < last or self.activate_last:
                x = self.act(x)
                inputs.append(x)
        return x, inputs

    def _top(self, inputs: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
        """d loss / d the last Linear's output, from d loss / d the MLP's output."""
        return self.act_backward(g, inputs[-1]) if self.activate_last else g

    def backward(self, inputs: list[torch.Tensor], g: torch.Tensor) -> None:
        """Write every layer's weight and bias gradient for d loss / d output `g` ([B, out])."""
        g = self._top(inputs, g)
        for i in range(len(self.linears) - 1, -1, -1):
            layer = self.linears[i]
            torch.mm(g.t(), inputs[i], out=layer.weight.grad)
            torch.sum(g, 0, out=layer.bias.grad)
            if i:
                g = self.act_backward(torch.mm(g, layer.weight), inputs[i])

    def input_grad(self, inputs: list[torch.Tensor], g: torch.Tensor, first_col: int = 0) -> torch.Tensor:
        """d loss / d input[:, first_col:] for d loss / d output `g`, no weight gradient (the columns
        from `first_col` on: the action's, where the critics take [observation, action])."""
        g = self._top(inputs, g)
        for i in range(len(self.linears) - 1, 0, -1):
            g = self.act_backward(torch.mm(g, self.linears[i].weight), inputs[i])
        return torch.mm(g, self.linears[0].weight[:, first_col:])


class CriticsGrad:
    """The written-out forward and backward of `nets.Critics`: n Q-networks on [observation, action]."""

    def __init__(self, critics: nn.Module, obs_dim: int, activation: type[nn.Module] | None = None):
        self.qs = [MLPGrad(q, activation) for q in critics.qs]
        self.obs_dim = obs_dim
        self.params = [p for q in self.qs for p in q.params]

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, n: int | None = None
    ) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        """The first n (default all) critics' Q-values ([B] each) and their layers' inputs."""
        x = torch.cat([obs, action], dim=-1)
        outs = [q.forward(x) for q in self.qs[:n]]
        return [out[:, 0] for out, _ in outs], [inputs for _, inputs in outs]

    def backward(self, inputs: list[list[torch.Tensor]], g_qs: list[torch.Tensor]) -> None:
        """Every critic's weight gradients for d loss / d Q_i (`g_qs`, [B] each)."""
        for q, ins, g in zip(self.qs, inputs, g_qs, strict=True):
            q.backward(ins, g[:, None])

    def action_grad(self, inputs: list[list[torch.Tensor]], g_qs: list[torch.Tensor]) -> torch.Tensor:
        """d loss / d action through the critics given (`g_qs`, [B] each, one per critic in `inputs`),
        no weight gradients."""
        total: torch.Tensor | None = None
        for q, ins, g in zip(self.qs, inputs, g_qs, strict=False):  # inputs: maybe the first critics only
            grad = q.input_grad(ins, g[:, None], self.obs_dim)
            total = grad if total is None else total + grad
        assert total is not None, "no critic's inputs"
        return total
