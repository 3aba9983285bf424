"""Adam's update as plain tensor ops that torch.compile can trace: what `train --compile` puts inside the
torch off-policy agents' compiled gradient step (TorchOffPolicyBase.compile_update).

Why not torch's own: the fused kernel (`torch._fused_adam_`) does not trace in torch 2.13 (functionalization
refuses its in-place writes of the graph's inputs), and `Optimizer.step` breaks the graph (its grad-mode
wrapper), which would split the step into a graph per optimizer, each paying its guard checks. Written as
torch's single-tensor Adam computes it (torch/optim/adam.py, `_single_tensor_adam`), the bias corrections
in float64 as the fused kernel takes them, from the step counter; inductor fuses it into one loop per
tensor. Betas and eps are read once, when the graph's Adam is made (`train --compile` makes it before the
first step): a later change to them, or an optimizer state loaded over this one, is not seen.

The optimizer keeps owning the state: the moments and step counters are its own `state` tensors, created
here as Adam's first step would create them for the fused kernel, so a later eager step, `state_dict` and
a learning-rate change see what they would have. The learning rate goes in as a 0-d tensor that
`set_learning_rate` fills: a Python float would be a constant of the graph, and every new value of a
schedule a new trace (the retracing trap, in torch's form).
"""

from __future__ import annotations

import torch

from rl2edge.train.torch_backend.optim_step import ADAM_OPTIONS


def _check(opt: torch.optim.Optimizer) -> dict:
    """The one param group of a plain Adam (ValueError for anything this update does not compute,
    including an option a later torch adds)."""
    if type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1:
        raise ValueError(f"GraphAdam computes one param group of torch.optim.Adam, got {opt!r}")
    group = opt.param_groups[0]
    unsupported = [k for k in ("amsgrad", "maximize", "decoupled_weight_decay") if group[k]]
    if group["weight_decay"]:
        unsupported.append("weight_decay")
    unsupported += sorted(group.keys() - ADAM_OPTIONS)
    if unsupported:
        raise ValueError(f"GraphAdam does not compute Adam's {', '.join(unsupported)}")
    return group


def init_adam_state(opt: torch.optim.Optimizer) -> None:
    """Create the state Adam(fused=True) creates on its first step where a parameter has none: step 0 as
    a float32 tensor on the parameter's device, zero moments."""
    for p in opt.param_groups[0]["params"]:
        if not opt.state.get(p):
            opt.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }


class GraphAdam:
    """One Adam optimizer's step, traceable: `step()` updates the parameters from their `.grad` and the
    optimizer's moments in place."""

    def __init__(self, opt: torch.optim.Optimizer):
        group = _check(opt)
        init_adam_state(opt)
        self.params: list[torch.Tensor] = list(group["params"])
        states = [opt.state[p] for p in self.params]
        self.exp_avgs = [s["exp_avg"] for s in states]
        self.exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        self.steps = [s["step"] for s in states]
        self.beta1, self.beta2 = (float(b) for b in group["betas"])
        self.eps = float(group["eps"])
        self.group = group
        self.lr = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.params[0].device)

    def sync_lr(self) -> None:
        """Copy the param group's learning rate into the tensor the graph reads (outside the graph)."""
        self.lr.fill_(float(self.group["lr"]))

    @torch.no_grad()
    def step(self) -> None:
        b1, b2 = self.beta1, self.beta2
        for p, m, v, t in zip(self.params, self.exp_avgs, self.exp_avg_sqs, self.steps, strict=True):
            g = p.grad
            t.add_(1)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            step = t.double()
            step_size = (self.lr / (1 - torch.pow(b1, step))).float()
            bias_correction2_sqrt = torch.sqrt(1 - torch.pow(b2, step)).float()
            denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
            p.sub_(step_size * m / denom)
