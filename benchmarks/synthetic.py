"""Synthetic policies and environments for latency measurements, where only the graph's shape matters:
an MLP of a given width on an 8-D observation, the same MLP on a 4-key Dict observation laid out as the
AGV example's sensors (30 values), and a Nature-CNN on 84x84x4 uint8 frames. The envs are
real gymnasium.Env subclasses, so the real export pipeline (rollout calibration, verification) runs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.torch_graph import TorchSource
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.spaces import action_spec, observation_spec


class VectorEnv8(gym.Env):
    """8-D observations drifting under a 2-D action in [-1, 1]; 200-step episodes."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (8,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._x, self._t = np.zeros(8, np.float32), 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._x, self._t = self.np_random.normal(0, 1, 8).astype(np.float32), 0
        return self._x.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action, np.float32)
        noise = self.np_random.normal(0, 0.3, 8)
        self._x = np.clip(0.95 * self._x + 0.1 * np.tile(a, 4) + noise, -10, 10).astype(np.float32)
        self._t += 1
        return self._x.copy(), -float(np.abs(self._x).mean()), False, self._t >= 200, {}


DICT4_KEYS = (("lidar", 24), ("imu", 2), ("goal", 3), ("speed", 1))


class DictEnv4(gym.Env):
    """Four Box keys of 24, 2, 3 and 1 values (the AGV's sensor groups) drifting under a 2-D action."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            [(k, gym.spaces.Box(-10.0, 10.0, (n,), np.float32)) for k, n in DICT4_KEYS]
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._x, self._t = np.zeros(30, np.float32), 0

    def _obs(self) -> dict[str, np.ndarray]:
        out, at = {}, 0
        for k, n in DICT4_KEYS:
            out[k], at = self._x[at : at + n].copy(), at + n
        return out

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._x, self._t = self.np_random.normal(0, 1, 30).astype(np.float32), 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        a = np.asarray(action, np.float32)
        noise = self.np_random.normal(0, 0.3, 30)
        self._x = np.clip(0.95 * self._x + 0.1 * np.tile(a, 15) + noise, -10, 10).astype(np.float32)
        self._t += 1
        return self._obs(), -float(np.abs(self._x).mean()), False, self._t >= 200, {}


class FrameEnv(gym.Env):
    """84x84x4 uint8 frames (HWC, as frame-stacked image envs give them), 6 discrete actions."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = gym.spaces.Discrete(6)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._frame(), {}

    def _frame(self) -> np.ndarray:
        base = self.np_random.integers(0, 256, (84, 84, 1), dtype=np.uint8)
        return np.repeat(base, 4, axis=2)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return self._frame(), float(action == 0), False, self._t >= 50, {}


def mlp_actor(width: int, seed: int = 0, inputs: int = 8) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(inputs, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 2)
    )


class NatureCNN(nn.Module):
    """Mnih et al. 2015, as SB3's NatureCNN + a linear head: uint8 frames scaled to [0, 1] inside."""

    def __init__(self, n_actions: int = 6, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, n_actions),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x / 255.0)


def synthetic_source(kind: str) -> TorchSource:
    """kind: mlp64, mlp256, dict4 (MLP 64x64 on DictEnv4) or cnn."""
    if kind == "cnn":
        env, actor, head = FrameEnv(), NatureCNN(), "argmax"
        env_id = "benchmarks.synthetic:FrameEnv"
    elif kind == "dict4":
        env, actor, head = DictEnv4(), mlp_actor(64, inputs=30), "clip_unscale"
        env_id = "benchmarks.synthetic:DictEnv4"
    else:
        env, actor, head = VectorEnv8(), mlp_actor(int(kind[3:])), "clip_unscale"
        env_id = "benchmarks.synthetic:VectorEnv8"
    obs = observation_spec(env.observation_space)
    act = action_spec(env.action_space)
    norm = RunningNormalizer(obs.shape, enabled=kind != "cnn")
    if kind != "cnn":  # a non-trivial folded normalization, as a trained policy would carry
        norm.update(np.random.default_rng(0).normal(0.5, 2.0, (1000, obs.size)))
    policy = DeployablePolicy(actor, norm, act, head, obs_layout=obs.layout).eval()
    return TorchSource(
        env_id,
        obs,
        act,
        norm,
        head,
        {"kind": "synthetic", "network": kind, "env_id": env_id},
        f"source ({kind}, torch)",
        policy=policy,
    )
