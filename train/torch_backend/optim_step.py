"""An optimizer step without torch.optim's per-call Python: `zero_grad(set_to_none=True)` as the loop it
is, and `torch.optim.Adam(fused=True).step()` as the two kernels it launches.

On the small nets trained here, Optimizer.step's wrappers (grad-mode and profiler hooks, per-parameter
checks) cost more than the fused kernel itself (see `benchmarks/train_throughput.py --profile`).
`fused_adam_step` makes the same two calls with the same arguments, so parameters and optimizer state
come out with the same bits (tests/test_optim_step.py, torch.equal); the optimizer keeps owning its state.
"""

from __future__ import annotations

import torch
from torch.optim import optimizer as _optimizer

# The param_group options of torch 2.13's Adam, every one of which the short path either passes on or
# checks: a torch that adds one makes the short path fall back rather than ignore it.
ADAM_OPTIONS = frozenset(torch.optim.Adam([torch.zeros(1, requires_grad=True)], fused=True).param_groups[0])


def clear_grads(opt: torch.optim.Optimizer) -> None:
    """`opt.zero_grad(set_to_none=True)`: every parameter's gradient to None (backward then writes it)."""
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = None


def fused_adam_step(opt: torch.optim.Optimizer) -> None:
    """One step of a fused, single-group Adam whose parameters share one device and dtype (the kernel
    refuses others). Falls back to `opt.step()` where the short path does not apply: the first step (it
    creates the state), a parameter without a gradient or state, step hooks (the short path would skip
    them), or options it does not pass on (another optimizer, amsgrad, maximize, several groups, a
    gradient scaler's state, an option a later torch adds)."""
    groups = opt.param_groups
    group = groups[0]
    params = group["params"]
    state = opt.state
    if (
        type(opt) is not torch.optim.Adam  # RMSprop (A2C), AdamW, ...: their own step
        or len(groups) != 1
        or not group["fused"]
        or group["amsgrad"]
        or group["maximize"]
        or group["decoupled_weight_decay"]
        or group.keys() != ADAM_OPTIONS
        or getattr(opt, "grad_scale", None) is not None
        or getattr(opt, "found_inf", None) is not None
        or opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or _optimizer._global_optimizer_pre_hooks
        or _optimizer._global_optimizer_post_hooks
    ):
        opt.step()
        return
    grads = [p.grad for p in params]
    states = [state.get(p) for p in params]  # .get: reading the defaultdict would add empty entries
    if any(g is None for g in grads) or any(not s or "step" not in s for s in states):
        opt.step()
        return
    steps = [s["step"] for s in states]
    beta1, beta2 = group["betas"]
    with torch.no_grad():  # as Optimizer.step: in-place updates of leaves that require grad
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params,
            grads,  # checked above: none is None
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
