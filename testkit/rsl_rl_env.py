"""rsl-rl's own PPO on a Gymnasium env, for the tests that hold rl2edge to a policy trained elsewhere: a small
vector-env adapter (rsl-rl's `VecEnv` over Gymnasium's SyncVectorEnv) and `train_rsl_rl`, which trains a
few iterations with rsl-rl's `OnPolicyRunner` and exports with the runner's own exporter, the one Isaac
Lab's policies come from (`policy.onnx`: normalizer inside, input `obs`, output `actions`). No rl2edge
code takes part in making the policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict


class GymVecEnv(VecEnv):
    """Box observations under the group "policy"; Box actions clipped to the bounds, as Isaac Lab's action
    terms clip them; `time_outs` on truncation."""

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, max_episode_length: int = 1000):
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id) for _ in range(num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        space = self.envs.single_action_space
        self.num_envs, self.num_actions = num_envs, int(np.prod(space.shape))
        self.max_episode_length = max_episode_length
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.device, self.cfg = "cpu", {}
        self.low, self.high = torch.as_tensor(space.low), torch.as_tensor(space.high)
        obs, _ = self.envs.reset(seed=seed)
        self._obs = torch.as_tensor(obs, dtype=torch.float32)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self._obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = self.envs.step(
            torch.clamp(actions, self.low, self.high).numpy()
        )
        self._obs = torch.as_tensor(obs, dtype=torch.float32)
        dones = torch.as_tensor(terminated | truncated)
        self.episode_length_buf += 1
        self.episode_length_buf[dones] = 0
        extras = {"time_outs": torch.as_tensor(truncated)}
        return self.get_observations(), torch.as_tensor(reward, dtype=torch.float32), dones, extras


def runner_cfg(hidden: list[int], steps: int, rnn: dict[str, Any] | None = None) -> dict[str, Any]:
    """rsl-rl's train config: an actor-critic with observation normalization inside each model."""
    actor = "RNNModel" if rnn else "MLPModel"
    model = {"hidden_dims": hidden, "activation": "elu", "obs_normalization": True, **(rnn or {})}
    return {
        "num_steps_per_env": steps,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {
            "class_name": actor,
            **model,
            "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0},
        },
        "critic": {"class_name": actor, **model},
        "algorithm": {
            "class_name": "PPO",
            "learning_rate": 1e-3,
            "num_learning_epochs": 5,
            "num_mini_batches": 4,
        },
        "multi_gpu": None,
    }


def train_rsl_rl(
    env_id: str,
    out: Path,
    iterations: int,
    *,
    num_envs: int = 8,
    steps: int = 64,
    hidden: list[int] | None = None,
    rnn: dict[str, Any] | None = None,
    seed: int = 0,
) -> tuple[Path, Path]:
    """Train with rsl-rl's runner and export with its exporter: (policy.onnx, the checkpoint model.pt); also
    out/policy_opset11.onnx, the same policy as Isaac Lab's exporter writes it (`export_as_isaac_lab`)."""
    from rsl_rl.runners import OnPolicyRunner

    torch.manual_seed(seed)
    env = GymVecEnv(env_id, num_envs, seed)
    runner = OnPolicyRunner(
        env, runner_cfg(hidden or [64, 64], steps, rnn), log_dir=str(out / "log"), device="cpu"
    )
    runner.learn(iterations)
    runner.export_policy_to_onnx(str(out), "policy.onnx")
    export_as_isaac_lab(runner, out / "policy_opset11.onnx")
    checkpoint = out / "model.pt"
    runner.save(str(checkpoint))
    return out / "policy.onnx", checkpoint


def export_as_isaac_lab(runner: Any, path: Path) -> None:
    """The policy's own ONNX wrapper (rsl-rl's `as_onnx`: the normalizer inside, `obs` -> `actions`, a
    recurrent one's `h_in`/`c_in` -> `h_out`/`c_out` of shape [layers, 1, hidden]) written as Isaac Lab's
    `export_policy_as_onnx` writes it: the TorchScript exporter, opset 11, batch 1, no dynamic axes."""
    model = runner.alg.get_policy().as_onnx(verbose=False).to("cpu").eval()
    torch.onnx.export(
        model, model.get_dummy_inputs(), str(path), opset_version=11, input_names=model.input_names,
        output_names=model.output_names, dynamic_axes={}, dynamo=False,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """`python -m testkit.rsl_rl_env --out DIR`: a policy made as an Isaac Lab run makes one (rsl-rl's PPO and
    exporter), for docs/export.md's walk-through: DIR/policy.onnx and DIR/model.pt."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--iterations", type=int, default=10)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    train_rsl_rl(args.env, args.out, args.iterations)


if __name__ == "__main__":
    main()
