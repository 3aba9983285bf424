"""The deployable graph, in torch: raw observation -> clip/normalize with the frozen statistics ->
policy network -> deterministic action head -> action in env units.

Built from the checkpoint alone; the same formulas as train.core.normalization and rl2edge.specs,
with their float32 constants baked in as buffers. The head is named after what the source algorithm
does to its network output at predict time:

| head          | used by                          | action                                   |
| ------------- | -------------------------------- | ---------------------------------------- |
| argmax        | PPO/A2C/DQN/Rainbow on Discrete  | argmax(out) + start (Rainbow: expected Q) |
|               | PPO/A2C on MultiDiscrete/Binary  | per component: argmax(its logits) + start |
| clip_unscale  | rl2edge PPO on Box               | center + clip(out, -1, 1) * half_range   |
| clip          | SB3 PPO/A2C on Box               | clip(out, low, high)                     |
| tanh_unscale  | SAC, squashed (gSDE) PPO         | center + tanh(out) * half_range          |
| unscale       | TD3/DDPG (actor ends in tanh)    | center + out * half_range                |
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from rl2edge.errors import CheckpointError, ExportError
from rl2edge.export.graph_spec import HEADS, head_for
from rl2edge.specs import ActionSpec, ActionTransform
from rl2edge.train.core.checkpoint import Checkpoint
from rl2edge.train.core.normalization import RunningNormalizer


class DeployablePolicy(nn.Module):
    def __init__(
        self,
        actor: nn.Module,
        norm: RunningNormalizer,
        action: ActionSpec,
        head: str,
        obs_layout: str = "flat",
        flat_input: bool = False,
    ):
        """`obs_layout` HWC: the graph takes NCHW (torch's convention); the runtime transposes the env's
        observation for ONNX, and onnx2tf makes the TFLite input NHWC, the env's own order.
        `flat_input`: the graph takes the observation's values flat, in the env's own order: an image Box
        of rl2edge's own, whose encoder reshapes them (train.core.spaces.network_view), as a Dict's camera
        key travels (a 4-D input would be taken for NCHW by onnx2tf)."""
        super().__init__()
        self.obs_layout, self.flat_input = obs_layout, flat_input
        if head not in HEADS:
            raise ExportError(f"unknown action head {head!r}")
        transform = ActionTransform(action)
        if (head == "argmax") != transform.discrete:
            raise ExportError(f"action head {head} does not fit a {action.kind} action space")
        self.actor, self.head = actor, head
        mean, inv_std = norm.constants()
        if obs_layout == "HWC":  # statistics follow the graph's CHW order
            mean, inv_std = mean.transpose(2, 0, 1), inv_std.transpose(2, 0, 1)
        flat = obs_layout == "flat"
        # An image graph's statistics carry the batch axis (1, C, H, W): onnx2tf turns the NCHW input into
        # NHWC and transposes 4-D constants with it, but broadcasts a 3-D (C, H, W) one against the NHWC
        # tensor as it stands (C = 1: a [1, 36, 36, 36] tensor). Without normalization an image graph has
        # none of these ops (x - 0) * 1.
        self.skip_norm = not flat and not norm.enabled
        shape = (-1,) if flat else (1, *mean.shape)
        self.register_buffer("obs_mean", torch.from_numpy(np.ascontiguousarray(mean.reshape(shape))))
        self.register_buffer("obs_inv_std", torch.from_numpy(np.ascontiguousarray(inv_std.reshape(shape))))
        self.norm_clip = float(norm.clip) if norm.enabled else None
        bounds = norm.clip_bounds()  # per element where some are left raw (SB3's norm_obs_keys)
        self.per_element_clip = bounds is not None
        if bounds is not None:
            bounds = bounds.transpose(2, 0, 1) if obs_layout == "HWC" else bounds
            self.register_buffer("obs_clip", torch.from_numpy(np.ascontiguousarray(bounds.reshape(shape))))
        self.discrete = transform.discrete
        self.nvec = list(action.nvec) if action.multi_discrete else None
        if self.nvec is not None:  # one index per component: argmax of its slice, plus its start (if any)
            self.act_start = torch.tensor(action.starts, dtype=torch.int64) if any(action.starts) else None
        elif self.discrete:
            self.start = action.start
        else:
            self.register_buffer("act_center", torch.from_numpy(transform.center))
            self.register_buffer("act_half_range", torch.from_numpy(transform.half_range))
            self.register_buffer("act_low", torch.tensor(action.low, dtype=torch.float32))
            self.register_buffer("act_high", torch.tensor(action.high, dtype=torch.float32))

    def normalized(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(obs.shape[0], -1) if self.obs_layout == "flat" else obs
        if self.skip_norm:
            return x
        x = (x - self.obs_mean) * self.obs_inv_std
        if self.per_element_clip:
            x = torch.maximum(torch.minimum(x, self.obs_clip), -self.obs_clip)
        elif self.norm_clip is not None:
            x = x.clamp(-self.norm_clip, self.norm_clip)
        return x

    def pre_head(self, obs: torch.Tensor) -> torch.Tensor:
        """The network's output before the head: logits, Q-values, or the action mean."""
        return self.actor(self.normalized(obs))

    def squash(self, out: torch.Tensor) -> torch.Tensor:
        """The unscaling heads' action in [-1, 1] before the unscale (the one place folded noise enters)."""
        if self.head == "clip_unscale":
            return out.clamp(-1.0, 1.0)
        if self.head == "tanh_unscale":
            return torch.tanh(out)
        if self.head == "unscale":
            return out
        raise ExportError(f"action head {self.head} has no [-1, 1]-scaled form")

    def unscale(self, scaled: torch.Tensor) -> torch.Tensor:
        return self.act_center + scaled * self.act_half_range

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head_of(self.pre_head(obs))

    def head_of(self, out: torch.Tensor) -> torch.Tensor:
        """The network's output -> the action in env units (the head)."""
        if self.head == "argmax" and self.nvec is not None:
            # slices, not split: onnx2tf turns ONNX's Split into SplitV with int64 sizes, which TFLite
            # runs only as a TF Select (flex) op
            action = torch.stack([out[:, a : a + n].argmax(-1) for a, n in self._slices()], -1)
            return action if self.act_start is None else action + self.act_start
        if self.head == "argmax":
            action = out.argmax(-1)
            return action + self.start if self.start else action
        if self.head == "clip":  # min/max, not Clip: ONNX's Clip takes scalar bounds only
            return torch.maximum(torch.minimum(out, self.act_high), self.act_low)
        return self.unscale(self.squash(out))

    def _slices(self) -> list[tuple[int, int]]:
        """Each component's (first logit, count) in the network's output."""
        assert self.nvec is not None
        firsts = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        return [(int(a), int(n)) for a, n in zip(firsts, self.nvec, strict=True)]

    def input_shape(self, obs_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The graph's input for one observation: the env's shape, CHW for HWC images, or its values flat."""
        if self.flat_input:
            return (int(np.prod(obs_shape)),)
        if self.obs_layout == "HWC":
            h, w, c = obs_shape
            return (c, h, w)
        return tuple(obs_shape)

    def from_env_layout(self, obs: np.ndarray) -> np.ndarray:
        """A batch of observations as the env gives them -> the graph's input order."""
        if self.flat_input:
            return np.ascontiguousarray(obs).reshape(len(obs), -1)
        return np.ascontiguousarray(obs.transpose(0, 3, 1, 2)) if self.obs_layout == "HWC" else obs


class KeyedInputs(nn.Module):
    """A Dict observation's graph: one input per key (the ONNX file names each after its key),
    concatenated in the manifest's order, then `graph` as it is, with its further inputs (folded noise)."""

    def __init__(self, graph: nn.Module, n_keys: int):
        super().__init__()
        self.graph, self.n_keys = graph, n_keys

    def forward(self, *args: torch.Tensor) -> Any:
        return self.graph(torch.cat(args[: self.n_keys], dim=-1), *args[self.n_keys :])


def load_actor(ckpt: Checkpoint, agent: Any) -> nn.Module:
    """The torch module that maps a normalized observation to the head's input, weights loaded: the
    algorithm's agent class builds it from the checkpoint's network spec (`deployable_actor`)."""
    try:
        state = load_file(str(ckpt.weights_path))
    except Exception as exc:  # safetensors raises several types for a bad file
        raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None

    def load(module: nn.Module, prefix: str) -> None:
        """Load `module` from the weights under `prefix` (the agent's name of that network)."""
        try:
            module.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
        except Exception as exc:  # missing or misshapen tensors
            raise CheckpointError(
                f"weights {ckpt.weights_path} do not fit the checkpoint's network: {exc}"
            ) from None

    return agent.deployable_actor(ckpt.network, load)


def build_deployable(ckpt: Checkpoint, agent: Any) -> tuple[DeployablePolicy, RunningNormalizer]:
    """A torch checkpoint's deployable graph and its normalizer; `agent` is its algorithm's torch agent
    class (train.algos)."""
    if ckpt.framework != "torch":
        raise CheckpointError(f"build_deployable takes torch checkpoints; {ckpt.path} is {ckpt.framework!r}")
    actor = load_actor(ckpt, agent).eval()
    norm = ckpt.normalizer()  # a frame stack's takes K observations (train.core.frame_stack)
    head = head_for(ckpt.algo, ckpt.action.categorical)
    policy = DeployablePolicy(actor, norm, ckpt.action, head, flat_input=ckpt.observation.is_image).eval()
    return policy, norm
