"""Weights of a torch module in memory (keep_best) and on disk (safetensors, no pickle, written
atomically): one place for every torch agent."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save as safetensors_save
from torch import nn

from rl2edge.fileio import write_bytes_atomic

WEIGHTS_FILE = "policy.safetensors"


def state_copy(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def save_safetensors(module: nn.Module, run_dir: Path) -> str:
    """Write the module's state_dict to run_dir/policy.safetensors; return the file's name."""
    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    write_bytes_atomic(run_dir / WEIGHTS_FILE, safetensors_save(state))
    return WEIGHTS_FILE
