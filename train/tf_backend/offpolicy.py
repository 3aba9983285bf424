"""Entry point for TF off-policy training: the algorithm's agent class under the shared driver."""

from __future__ import annotations

import functools
from typing import Any

from train.core.offpolicy_driver import train_with_backend


def agent_class(algo: str) -> Any:
    if algo == "sac":
        from train.tf_backend.sac import TFSAC

        return TFSAC
    if algo in ("td3", "ddpg"):
        from train.tf_backend.td3 import TFTD3

        return TFTD3
    from train.tf_backend.dqn import TFDQN

    return TFDQN


train = functools.partial(train_with_backend, "tf")
"""train(env_id, cfg, seed, run_dir, device="auto", progress=None, agent_out=None) -> TrainResult"""
