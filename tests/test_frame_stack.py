"""Frame stacking (`frame_stack: K`) with Stable-Baselines3's convention, from training to an artifact that
takes one observation per call and keeps the K-1 previous ones as its state.

The stack is checked against SB3's own VecFrameStack (something this project did not write), the export
against the training side's own stacked evaluator. Discrete actions are compared only where the two best
logits are at least 1e-4 apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.runtime.policy import Policy
from rl2edge.train.algos import build_config
from rl2edge.train.core.envs import make_env
from rl2edge.train.core.frame_stack import FrameStacker, StackedObservation
from testkit.runs import export_run, tiny_train

pytestmark = pytest.mark.integration

NOVEL = "CartPoleNoVel-v1"


def test_the_stack_is_sb3s_vecframestack() -> None:
    """Over three episodes with the same seeds and actions: SB3's VecFrameStack (channels last on a flat
    observation) gives the very observations StackedObservation and FrameStacker give."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    sb3 = VecFrameStack(DummyVecEnv([lambda: make_env(NOVEL)]), 4)
    ours = StackedObservation(make_env(NOVEL), 4)
    stacker = FrameStacker(4, 2)
    sb3.seed(7)
    theirs = sb3.reset()[0]
    mine, _ = ours.reset(seed=7)
    stacker.reset()
    acted = stacker(mine[-2:])
    rng = np.random.default_rng(0)
    episodes = steps = 0
    while episodes < 3:
        np.testing.assert_array_equal(mine, theirs)
        np.testing.assert_array_equal(acted, mine)
        a = int(rng.integers(2))
        theirs_all, _, dones, infos = sb3.step(np.array([a]))
        mine, _, terminated, truncated, _ = ours.step(a)
        steps += 1
        if terminated or truncated:  # SB3 returns the next episode's first stack; its last in the info
            np.testing.assert_array_equal(mine, infos[0]["terminal_observation"])
            episodes += 1
            mine, _ = ours.reset(seed=7 + episodes)
            sb3.seed(7 + episodes)  # takes effect at SB3's next reset: redo it so both envs share the seed
            theirs_all = sb3.reset()
            stacker.reset()
        theirs = theirs_all[0]
        acted = stacker(mine[-2:])
        assert not dones[0] or terminated or truncated
    assert steps > 30
    sb3.close()
    ours.close()


def test_frame_stack_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="frame_stack must be from 1"):
        build_config(NOVEL, overrides={"frame_stack": 0}, algo="ppo")
    with pytest.raises(ConfigError, match="the recurrent cell is the policy's memory"):
        build_config(NOVEL, overrides={"frame_stack": 4}, algo="ppo_lstm")


def test_a_dict_observation_is_not_stacked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="stacking is implemented for flat Box observations"):
        tiny_train("examples.agv:AgvDictEnv", tmp_path / "r", steps=256, frame_stack=2)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_the_artifact_takes_one_observation_and_keeps_the_rest_as_state(
    framework: str, tmp_path: Path
) -> None:
    run = tiny_train(NOVEL, tmp_path / "run", steps=4096, framework=framework, frame_stack=4)
    ckpt = json.loads((run / "checkpoint.json").read_text())
    assert ckpt["observation_space"]["shape"] == [2] and ckpt["network"]["frame_stack"] == 4
    assert ckpt["network"]["obs_dim"] == 8 and len(ckpt["normalization"]["mean"]) == 8
    export_run(run, tmp_path / "art", "all")
    m = json.loads((tmp_path / "art" / "int8" / "manifest.json").read_text())
    assert m["observation"]["shape"] == [2]
    assert [(t["name"], t["shape"]) for t in m["state"]["tensors"]] == [("frames", [1, 6])]
    assert m["model"]["input"]["shape"] == [1, 2]
    fp32 = json.loads((tmp_path / "art" / "fp32" / "manifest.json").read_text())["verification"]
    assert fp32["tflite_vs_source"]["disagreements_outside_ties"] == 0
    # the served file, one observation per call, against training's own stacked evaluator on the same steps
    if framework == "torch":
        _served_equals_training(run, tmp_path / "art" / "fp32")


def _served_equals_training(run: Path, art: Path) -> None:
    import torch
    from safetensors.torch import load_file

    from rl2edge.train.core.network_spec import NetworkSpec
    from rl2edge.train.core.normalization import RunningNormalizer
    from rl2edge.train.torch_backend.nets import ActorCritic

    ckpt = json.loads((run / "checkpoint.json").read_text())
    net = ActorCritic.from_network_spec(NetworkSpec.from_json(ckpt["network"]))
    net.load_state_dict(load_file(str(run / "policy.safetensors")))
    norm = RunningNormalizer.from_dict((8,), ckpt["normalization"])
    served = Policy.load(art)
    env = make_env(NOVEL)
    stacker = FrameStacker(4, 2)
    compared = 0
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        served.reset()
        stacker.reset()
        done = False
        while not done:
            x = torch.as_tensor(norm.normalize(stacker(obs)[None]).astype(np.float32))
            with torch.no_grad():
                logits = net.actor(x)[0].numpy()
            action = served.predict(obs)
            top2 = np.sort(logits)[-2:]
            if top2[1] - top2[0] >= 1e-4:
                assert action == int(logits.argmax())
                compared += 1
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    env.close()
    assert compared > 20
