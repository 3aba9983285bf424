"""Device and seeding for every torch agent: where it runs, and the seed set before any initializer draws."""

from __future__ import annotations

import torch

from rl2edge.errors import ConfigError
from rl2edge.train.core.threads import cpu_threads
from rl2edge.train.torch_backend.denormals import start_workers_flushing


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "--device cuda was asked for but torch sees no CUDA device; use --device cpu or auto"
        )
    return torch.device(device)


def setup_torch(seed: int, device: str) -> torch.device:
    """The device; the CPU threads of train.core.threads (default one: fastest on small MLPs, and the
    same bits whatever the machine's core count); the seed, before any draw."""
    dev = resolve_device(device)
    if dev.type == "cpu":  # workers started now flush subnormals (train.torch_backend.denormals)
        start_workers_flushing(cpu_threads())
    torch.manual_seed(seed)
    return dev
