"""The deployable graph, in torch: raw observation -> clip/normalize with the frozen statistics ->
policy network -> deterministic action head -> action in env units.

Built from the checkpoint alone; the same formulas as train.core.normalization and train.core.actions,
with their float32 constants baked in as buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from rl2edge.errors import CheckpointError
from train.core.actions import ActionTransform
from train.core.checkpoint import Checkpoint
from train.core.normalization import RunningNormalizer
from train.torch_backend.policy import ActorCritic


class DeployablePolicy(nn.Module):
    def __init__(self, actor: nn.Module, norm: RunningNormalizer, action_spec: dict[str, Any]):
        super().__init__()
        self.actor = actor
        mean, inv_std = norm.constants()
        self.register_buffer("obs_mean", torch.from_numpy(mean.reshape(-1)))
        self.register_buffer("obs_inv_std", torch.from_numpy(inv_std.reshape(-1)))
        self.norm_clip = float(norm.clip) if norm.enabled else None
        transform = ActionTransform(action_spec)
        self.discrete = transform.discrete
        if self.discrete:
            self.start = transform.start
        else:
            self.register_buffer("act_center", torch.from_numpy(transform.center))
            self.register_buffer("act_half_range", torch.from_numpy(transform.half_range))

    def pre_head(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (discrete) or the Gaussian mean in [-1, 1]-scaled units (Box)."""
        x = (obs.reshape(obs.shape[0], -1) - self.obs_mean) * self.obs_inv_std
        if self.norm_clip is not None:
            x = x.clamp(-self.norm_clip, self.norm_clip)
        return self.actor(x)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.pre_head(obs)
        if self.discrete:
            action = out.argmax(-1)
            return action + self.start if self.start else action
        return self.act_center + out.clamp(-1.0, 1.0) * self.act_half_range


def folded_description(norm: RunningNormalizer, action_spec: dict[str, Any]) -> dict[str, Any]:
    """What the manifest says is inside the graph."""
    mean, inv_std = norm.constants()
    transform: dict[str, Any]
    if action_spec["type"] == "discrete":
        transform = {"kind": "argmax", "start": int(action_spec.get("start", 0))}
    else:
        t = ActionTransform(action_spec)
        transform = {
            "kind": "clip_unscale",
            "formula": "center + clip(mean, -1, 1) * half_range",
            "center": t.center.tolist(),
            "half_range": t.half_range.tolist(),
        }
    return {
        "normalization": {
            "enabled": norm.enabled,
            "formula": "clip((obs - mean) * inv_std, -clip, clip)",
            "mean": mean.reshape(-1).tolist(),
            "inv_std": inv_std.reshape(-1).tolist(),
            "clip": norm.clip if norm.enabled else None,
            "eps": norm.eps,
            "count": norm.count,
        },
        "action_transform": transform,
        "noise": None,
    }


def build_deployable(ckpt: Checkpoint) -> tuple[DeployablePolicy, RunningNormalizer]:
    meta = ckpt.meta
    if ckpt.framework != "torch":
        raise CheckpointError(
            f"checkpoint framework {ckpt.framework!r} cannot be exported yet; torch checkpoints can"
        )
    if meta["network"].get("type") != "actor_critic_mlp":
        raise CheckpointError(f"unknown network type {meta['network'].get('type')!r} in {ckpt.path}")
    net = ActorCritic.from_network_spec(meta["network"])
    try:
        state = load_file(str(ckpt.weights_path))
        net.load_state_dict(state)
    except Exception as exc:  # safetensors and load_state_dict raise several types for a bad file
        raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None
    shape = tuple(meta["observation_space"]["shape"])
    norm = RunningNormalizer.from_dict(shape, meta["normalization"])
    policy = DeployablePolicy(net.actor, norm, meta["action_space"]).eval()
    return policy, norm


def torch_act(policy: DeployablePolicy) -> Any:
    """A raw-observation -> env-action callable of the source policy, as the evaluator wants it."""

    def act(obs: np.ndarray) -> Any:
        with torch.no_grad():
            out = policy(torch.as_tensor(np.asarray(obs, np.float32)[None]))[0].numpy()
        return int(out) if policy.discrete else out

    return act
