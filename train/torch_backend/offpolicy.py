"""Entry point for torch off-policy training: the algorithm's agent class under the shared driver."""

from __future__ import annotations

import functools
from typing import Any

from train.core.offpolicy_driver import train_with_backend


def agent_class(algo: str) -> Any:
    if algo == "sac":
        from train.torch_backend.sac import TorchSAC

        return TorchSAC
    if algo in ("td3", "ddpg"):
        from train.torch_backend.td3 import TorchTD3

        return TorchTD3
    from train.torch_backend.dqn import TorchDQN

    return TorchDQN


train = functools.partial(train_with_backend, "torch")
"""train(env_id, cfg, seed, run_dir, device="auto", progress=None, agent_out=None) -> TrainResult"""
