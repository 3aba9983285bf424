"""`train --matmul-precision`: the internal precision of torch's float32 matrix products during training,
by torch's own names (`torch.set_float32_matmul_precision`):

- "highest" (the default): float32 throughout, what the tests and the export parity checks assume.
- "high": TF32 on a CUDA GPU with tensor cores (an A100's default in TensorFlow, not in torch); float32
  on a CPU.
- "medium": bfloat16 products with float32 accumulation where oneDNN uses a bfloat16 kernel (x86 with
  AMX, such as a Sapphire Rapids Xeon; `has_bf16_matmul` measures it); elsewhere as "high".

Why opt-in: the weights, their gradients and Adam stay float32, but each product rounds its operands to
8 bits of mantissa, so a run under "medium" is another run than the default one (a different trajectory
from the same seed), and its return has to be measured, not assumed (benchmarks/train_throughput.py
`--who torch-bf16`). The setting holds for the training phases only (`training_phase`, where the agents
also flush subnormals): evaluations, the checkpoint's choice and the exported policy compute at float32,
and the process's own setting comes back after each phase.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from rl2edge.train.torch_backend.denormals import flush_denormals


@contextmanager
def matmul_precision(precision: str) -> Iterator[None]:
    """torch's float32 matmul precision inside the `with` (torch refuses a name it does not know)."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


@contextmanager
def training_phase(precision: str) -> Iterator[None]:
    """What every torch trainer's training phase runs under: subnormals flushed, as TF's executor does
    (train.torch_backend.denormals), and the run's matmul precision."""
    with flush_denormals(), matmul_precision(precision):
        yield


@functools.lru_cache(maxsize=1)
def has_bf16_matmul() -> bool:
    """oneDNN on this CPU multiplies float32 matrices through bfloat16 under "medium". Measured, not read
    from the CPU's flags: a Xeon with AVX512-BF16 and no AMX kept float32 products for a 256x256 matmul."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    exact = x.double() @ w.double()
    with matmul_precision("medium"):
        got = x @ w
    # bfloat16 operands (8 bits of mantissa) give ~1e-3 of the largest entry; float32 ~1e-7
    return float((got.double() - exact).abs().max() / exact.abs().max()) > 1e-4
