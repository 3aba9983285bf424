"""What the torch off-policy agents share: device and seeding, the tensor boundary, learning-rate
updates over all optimizers, weights in memory and on disk (safetensors, no pickle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save as safetensors_save
from torch import nn

from rl2edge.fileio import write_bytes_atomic
from train.torch_backend.ppo import resolve_device

WEIGHTS_FILE = "policy.safetensors"


class TorchOffPolicyBase:
    framework = "torch"
    stat_names: tuple[str, ...] = ()

    def __init__(self, seed: int, device: str):
        dev = resolve_device(device)
        if dev.type == "cpu":
            torch.set_num_threads(1)  # small MLPs: one thread is fastest and bit-reproducible
        torch.manual_seed(seed)  # before any initializer draws
        self.dev, self.device = dev, str(dev)
        self.nets = nn.ModuleDict()  # every network, targets included: what is saved and restored
        self.optimizers: list[torch.optim.Optimizer] = []

    def _t(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.dev)

    def adam(self, params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
        opt = torch.optim.Adam(params, lr=lr, fused=self.dev.type in ("cpu", "cuda"))
        self.optimizers.append(opt)
        return opt

    def set_learning_rate(self, lr: float) -> None:
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr

    def update_target(self) -> None:
        """Only DQN has a target that the driver updates on a period."""

    def get_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.nets.state_dict().items()}

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        self.nets.load_state_dict(state)

    def save_weights(self, run_dir: Path) -> str:
        state = {k: v.detach().cpu().contiguous() for k, v in self.nets.state_dict().items()}
        write_bytes_atomic(run_dir / WEIGHTS_FILE, safetensors_save(state))
        return WEIGHTS_FILE

    @staticmethod
    def mean_stats(rows: list[torch.Tensor]) -> np.ndarray:
        return torch.stack(rows).nanmean(0).cpu().numpy()
