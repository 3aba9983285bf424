"""Entry point for TF off-policy training: the algorithm's agent class under the shared driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from train.core.finish import TrainResult
from train.core.offpolicy_config import OffPolicyConfig
from train.core.offpolicy_driver import train_offpolicy


def agent_class(algo: str) -> Any:
    if algo == "sac":
        from train.tf_backend.sac import TFSAC

        return TFSAC
    if algo in ("td3", "ddpg"):
        from train.tf_backend.td3 import TFTD3

        return TFTD3
    from train.tf_backend.dqn import TFDQN

    return TFDQN


def train(
    env_id: str,
    cfg: OffPolicyConfig,
    seed: int,
    run_dir: Path,
    device: str = "auto",
    progress: bool | None = None,
    agent_out: list[Any] | None = None,
) -> TrainResult:
    cls = agent_class(cfg.algo)

    def factory(network: dict[str, Any], cfg: Any, seed: int, device: str) -> Any:
        agent = cls(network, cfg, seed, device)
        if agent_out is not None:
            agent_out.append(agent)
        return agent

    return train_offpolicy(env_id, cfg, seed, run_dir, factory, device=device, progress=progress)
