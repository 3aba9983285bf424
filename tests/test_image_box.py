"""An image Box outside a Dict (a camera alone, as an Atari frame is to SB3's CnnPolicy): trained through
the Nature-CNN by rl2edge's algorithms, exported with the frame in the env's own layout, and SB3 CnnPolicy
zips imported and checked against SB3's own predict."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.errors import ConfigError
from rl2edge.train.core.encoder_spec import encoder_spec, image_mask, refuse_image_keys
from rl2edge.train.core.envs import make_env, make_vec_env, vec_observation_spec
from rl2edge.train.core.spaces import IMAGE_KEY, network_view

HWC = "testkit.dict_envs:BoxCameraCartPole"
CHW = "testkit.dict_envs:BoxCameraCartPoleCHW"


@pytest.mark.parametrize(
    ("env_id", "shape", "layout"), [(HWC, (36, 36, 1), "HWC"), (CHW, (1, 36, 36), "CHW")]
)
def test_an_image_box_is_one_image_key_to_the_network(
    env_id: str, shape: tuple[int, ...], layout: str
) -> None:
    envs = make_vec_env(env_id, 2)
    spec = vec_observation_spec(envs)  # the checkpoint's and the manifest's: the env's own frame
    assert (spec.shape, spec.layout, spec.is_dict) == (shape, layout, False)
    view = network_view(spec)
    assert [k.name for k in view.keys] == [IMAGE_KEY] and view.shape == (36 * 36,)
    enc = encoder_spec(view)
    assert enc is not None and enc.keys[0].image and enc.keys[0].scale == 1 / 255
    assert enc.keys[0].channels_last == (layout == "HWC")
    mask = image_mask(spec)
    assert mask is not None and mask.all()  # every value a pixel: never normalized, scaled in the network
    obs, _ = envs.reset(seed=0)
    frame, _ = make_env(env_id).reset(seed=0)
    assert obs.shape == (2, 36 * 36) and np.array_equal(obs[0], frame.reshape(-1))  # the env's own order


def test_an_algorithm_without_image_encoders_names_the_ones_with() -> None:
    spec = vec_observation_spec(make_vec_env(HWC, 1))
    with pytest.raises(
        ConfigError, match=r"the observation is an image \(36, 36, 1\): rl2edge trains images with"
    ):
        refuse_image_keys(spec, "ppo_lstm", ["ppo", "a2c"])


@pytest.mark.integration  # about 40 s each: a CNN on 2 cores
@pytest.mark.parametrize(("algo", "framework", "env_id"), [("ppo", "torch", HWC), ("dqn", "tf", CHW)])
def test_a_camera_alone_trains_exports_int8_and_runs_in_the_runtime(
    tmp_path: Path, algo: str, framework: str, env_id: str
) -> None:
    """A short run (what is checked is the path, not the return): the checkpoint and the manifest keep the
    frame's shape, the int8 file takes its values flat in the env's own order (as a Dict's camera key: a
    4-D input would be taken for NCHW by the converter), `Policy.predict` takes the frame in its shape,
    uint8 straight in, and `evaluate` runs it."""
    from rl2edge.runtime import Policy

    run, art = tmp_path / "run", tmp_path / "art"
    steps = ["--steps", "1024"]
    args = ["train", "--algo", algo, "--framework", framework, "--env", env_id, *steps, "--out", str(run)]
    assert main([*args, "--no-progress"]) == 0
    ckpt = json.loads((run / "checkpoint.json").read_text())
    assert ckpt["network"]["encoder"]["keys"][0]["name"] == IMAGE_KEY
    assert main(["export", str(run), "--quantize", "int8", "--out", str(art)]) == 0
    manifest = json.loads((art / "manifest.json").read_text())
    shape = [36, 36, 1] if env_id == HWC else [1, 36, 36]
    assert manifest["observation"]["shape"] == shape, manifest["observation"]
    assert (
        manifest["model"]["input"]["shape"] == [1, 36 * 36] and manifest["model"]["input"]["layout"] is None
    )
    policy = Policy.load(art)
    frame, _ = make_env(env_id).reset(seed=3)
    assert policy.predict(frame) in (0, 1) and policy.predict(frame.astype(np.float32)) == policy.predict(
        frame
    )
    assert main(["evaluate", str(art), "--episodes", "2", "--seed", "0"]) == 0


@pytest.mark.integration  # about 30 s
def test_an_sb3_cnnpolicy_zip_exports_and_matches_sb3s_predict(tmp_path: Path) -> None:
    """SB3's PPO CnnPolicy on the HWC camera (SB3 transposes it to CHW for its network, VecTransposeImage):
    the export takes the env's HWC frame, and its own check against SB3's predict must pass (fp32: the
    same action outside near ties; int8 within its tolerance), or nothing is written."""
    import warnings

    from stable_baselines3 import PPO

    from rl2edge.runtime import Policy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = PPO("CnnPolicy", make_env(HWC), n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.learn(256)
    model.save(tmp_path / "cnn.zip")
    art = tmp_path / "art"
    assert (
        main(["export", str(tmp_path / "cnn.zip"), "--env", HWC, "--quantize", "fp32", "--out", str(art)])
        == 0
    )
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["observation"]["shape"] == [36, 36, 1] and manifest["model"]["input"]["layout"] == "NHWC"
    check = manifest["verification"]["tflite_vs_source"]
    assert check["metric"] == "agreement" and check["disagreements_outside_ties"] == 0, check
    assert manifest["verification"]["reference"] == "SB3 predict", manifest["verification"]
    frame, _ = make_env(HWC).reset(seed=5)
    assert Policy.load(art).predict(frame) in (0, 1)
