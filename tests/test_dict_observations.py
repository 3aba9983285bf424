"""Dict observations from training to the artifact: the keys' order, one named model input per key,
Policy.predict on a mapping, and clear errors for what does not fit.

The envs (testkit.dict_envs) declare their keys out of alphabetical order, so a sorted order anywhere
would show. Parity between a source and its files on held-out observations is the export's own check
(it fails the export above tolerance); these tests add what that check cannot see."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.errors import ConfigError, ObservationError
from rl2edge.runtime.policy import Policy
from rl2edge.specs import ObservationKey, ObservationSpec
from rl2edge.train.core.evaluation import evaluate
from rl2edge.train.core.spaces import observation_spec
from testkit.runs import export_run, tiny_train

CARTPOLE = "testkit.dict_envs:DictCartPole"
PENDULUM = "testkit.dict_envs:DictPendulum"


# ---------------------------------------------------------------------------------------- the spec
def test_a_dict_space_keeps_its_declared_order_and_units() -> None:
    from testkit.dict_envs import DictCartPole

    env = DictCartPole()
    spec = observation_spec(env.observation_space, env.metadata["observation_units"])
    assert [k.name for k in spec.keys] == ["pole", "cart"]  # not sorted
    assert [k.unit for k in spec.keys] == ["rad, rad/s", "m, m/s"]
    assert spec.shape == (4,) and spec.key_slices == [("pole", slice(0, 2)), ("cart", slice(2, 4))]
    obs, _ = env.reset(seed=3)
    flat = spec.flatten(obs)
    np.testing.assert_array_equal(flat, np.concatenate([obs["pole"], obs["cart"]]))
    assert {k: v.tolist() for k, v in spec.split(flat).items()} == {k: v.tolist() for k, v in obs.items()}
    assert ObservationSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        ({"pole": [0.0, 0.0], "cam": np.zeros((8, 6, 1))}, "missing key(s) ['cart']"),
        (
            {"pole": [0.0, 0.0], "cart": [0.0, 0.0], "cam": np.zeros(48), "lidar": [1.0]},
            "unexpected key(s) ['lidar']",
        ),
        (
            {"pole": [0.0, 0.0, 0.0], "cart": [0.0, 0.0], "cam": np.zeros((8, 6, 1))},
            "key 'pole' has 3 values",
        ),
        # a frame of the right size in another layout is refused, never read as scrambled pixels
        (
            {"pole": [0.0, 0.0], "cart": [0.0, 0.0], "cam": np.zeros((1, 8, 6))},
            "key 'cam' is a (8, 6, 1) frame",
        ),
    ],
)
def test_a_mapping_that_does_not_fit_is_one_line_naming_the_key(obs: dict, message: str) -> None:
    spec = ObservationSpec.of_keys(
        [
            ObservationKey("pole", (2,)),
            ObservationKey("cart", (2,)),
            ObservationKey("cam", (8, 6, 1), "uint8"),
        ]
    )
    with pytest.raises(ObservationError) as info:
        spec.flatten(obs)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (gym.spaces.Dict({"cam": gym.spaces.Box(0, 255, (64, 64, 8), np.uint8)}), "neither HWC nor CHW"),
        (gym.spaces.Dict({"mode": gym.spaces.Discrete(3)}), "key 'mode' is Discrete(3)"),
        (gym.spaces.Dict({"noise": gym.spaces.Box(-1, 1, (2,))}), "key 'noise' is the name of one"),
        (gym.spaces.Dict({"a-b": gym.spaces.Box(-1, 1, (2,))}), "key 'a-b' is not a name"),
        (gym.spaces.Dict({"grid": gym.spaces.Box(-1, 1, (2, 2, 8, 8))}), "key 'grid' has shape (2, 2, 8, 8)"),
    ],
)
def test_a_dict_space_that_cannot_be_served_is_refused_by_name(space: gym.Space, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        observation_spec(space)


# ------------------------------------------------------------------------------ train -> artifact
def _inputs(model: Path) -> dict[str, list[int]]:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(model)).get_signature_runner()
    return {k: v["shape"].tolist() for k, v in runner.get_input_details().items()}


def _concat_dtypes(model: Path) -> list[str]:
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(model))
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interp.get_tensor_details()}
    return [dtypes[op["outputs"][0]] for op in interp._get_ops_details() if op["op_name"] == "CONCATENATION"]


def test_ppo_on_a_dict_env_exports_one_named_input_per_key(tmp_path: Path) -> None:
    """Through the real main(): train (torch) and export int8. The TFLite and ONNX files take `pole` and
    `cart`; the manifest lists the keys in the declared order with their units; predict on a mapping
    (any insertion order) equals predict on the keys' concatenation, and evaluate of the file in the
    Dict env equals evaluate of the source."""
    run, art = tmp_path / "run", tmp_path / "art"
    assert main(["train", "--algo", "ppo", "--env", CARTPOLE, "--steps", "4096", "--out", str(run),
                 "--no-progress"]) == 0  # fmt: skip
    assert main(["export", str(run), "--quantize", "int8", "--out", str(art), "--calib-episodes", "3",
                 "--eval-episodes", "3", "--no-progress"]) == 0  # fmt: skip
    manifest = json.loads((art / "manifest.json").read_text())
    obs = manifest["observation"]
    assert obs["type"] == "dict" and [k["name"] for k in obs["keys"]] == ["pole", "cart"]
    assert obs["keys"][1] == {
        "name": "cart",
        "shape": [2],
        "dtype": "float32",
        "low": [float(np.float32(-4.8)), None],  # the space's float32 bound, written exactly
        "high": [float(np.float32(4.8)), None],
        "unit": "m, m/s",
    }
    assert _inputs(art / "policy.tflite") == {"pole": [1, 2], "cart": [1, 2]}
    # the keys are joined in float32, before the folded normalization: quantized, the raw pole angle
    # and cart position would share one int8 scale
    assert _concat_dtypes(art / "policy.tflite") == ["float32"]
    assert manifest["onnx"]["input"] == ["pole", "cart"]
    assert manifest["model"]["input"]["keys"] == [
        {"name": "pole", "shape": [1, 2]},
        {"name": "cart", "shape": [1, 2]},
    ]
    policy = Policy.load(art)
    onnx = Policy.load(art, backend="onnxruntime")
    rng = np.random.default_rng(0)
    for _ in range(50):
        pole, cart = rng.normal(0, 0.1, 2).astype(np.float32), rng.normal(0, 0.5, 2).astype(np.float32)
        flat = np.concatenate([pole, cart])
        action = policy.predict({"cart": cart, "pole": pole})
        assert action == policy.predict(flat) == onnx.predict({"pole": pole, "cart": cart})
    with pytest.raises(ObservationError, match="missing key"):
        policy.predict({"pole": pole})
    with pytest.raises(ObservationError, match=r"unexpected key\(s\) \['lidar'\]"):
        policy.predict({"pole": pole, "cart": cart, "lidar": cart})
    with pytest.raises(ObservationError, match="key 'cart' has 3 values"):
        policy.predict({"pole": pole, "cart": np.zeros(3, np.float32)})
    with pytest.raises(ObservationError, match=r"NaN or Inf: cart\[0\] = nan$"):
        policy.predict({"pole": pole, "cart": np.array([np.nan, 0.0], np.float32)})
    with pytest.raises(ObservationError, match="are not numbers"):
        policy.predict({"pole": pole, "cart": np.array(["a", "b"])})
    # lists and other shapes of the right size (a PLC client's values) take the general path
    assert policy.predict({"pole": pole.tolist(), "cart": cart[None]}) == policy.predict(flat)
    kept = manifest["verification"]["closed_loop"]
    assert evaluate(policy.predict, CARTPOLE, 3, 0).returns == kept["this_file"]["returns"]


def test_tf_sac_on_a_dict_env_exports_with_folded_ou_noise(tmp_path: Path) -> None:
    """The TF route (SavedModel) with OU noise folded in: the graph takes `rate`, `angle`, `noise` and
    `ou_state`; with exploration off it is the deterministic policy (export checks that), and the noise
    state advances on a mapping as on the flat vector."""
    run = tiny_train(PENDULUM, tmp_path / "run", steps=600, algo="sac", framework="tf", learning_starts=200)
    from rl2edge.export.pipeline import ExportOptions, export_path

    opts = ExportOptions(
        quantize="fp32", calib_episodes=2, eval_episodes=2, progress=False, noise="ou:sigma=0.3"
    )
    export_path(run, tmp_path / "art", opts)
    assert _inputs(tmp_path / "art" / "policy.tflite") == {
        "rate": [1, 1],
        "angle": [1, 2],
        "noise": [1, 1],
        "episode_start": [1, 1],
        "ou_state": [1, 1],
    }
    a, b = Policy.load(tmp_path / "art"), Policy.load(tmp_path / "art")
    for i in range(20):
        obs = {"rate": np.array([0.1 * i], np.float32), "angle": np.array([0.6, 0.8], np.float32)}
        np.testing.assert_array_equal(a.predict(obs), b.predict(np.array([0.1 * i, 0.6, 0.8], np.float32)))
    np.testing.assert_array_equal(a.noise_state, b.noise_state)
    assert np.abs(a.noise_state).sum() > 0


# Every algorithm in both backends (the integration tier: about 2 minutes).
MATRIX = [
    ("ppo", CARTPOLE, {}),
    ("a2c", PENDULUM, {}),
    ("dqn", CARTPOLE, {"learning_starts": 200}),
    ("rainbow", CARTPOLE, {"learning_starts": 200}),
    ("sac", PENDULUM, {"learning_starts": 200}),
    ("td3", PENDULUM, {"learning_starts": 200}),
]


@pytest.mark.integration
@pytest.mark.parametrize("framework", ["torch", "tf"])
@pytest.mark.parametrize(("algo", "env_id", "overrides"), MATRIX, ids=[m[0] for m in MATRIX])
def test_every_algorithm_trains_and_exports_a_dict_env(
    tmp_path: Path, algo: str, env_id: str, overrides: dict, framework: str
) -> None:
    """Short training, then fp32 and int8 files: the export's parity checks pass (fp32 within its
    tolerance of the source, or it fails), both files take one input per key, and the int8 file's
    closed-loop return is recorded."""
    run = tiny_train(env_id, tmp_path / "run", steps=800, algo=algo, framework=framework, **overrides)
    report = export_run(run, tmp_path / "art", "all")
    keys = ["pole", "cart"] if env_id == CARTPOLE else ["rate", "angle"]
    for mode in ("fp32", "int8"):
        assert sorted(_inputs(tmp_path / "art" / mode / "policy.tflite")) == sorted(keys)  # TFLite sorts them
    assert {r.mode for r in report.rows} >= {"fp32", "int8"}
