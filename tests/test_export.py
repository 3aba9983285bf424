"""Export: the real converters (torch.onnx, onnx2tf, TFLiteConverter) and verification through the runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rl2edge.errors import ConfigError, ToleranceError
from rl2edge.export.pipeline import ExportOptions, export_path
from rl2edge.export.sources.checkpoint import source_from_checkpoint
from rl2edge.export.tolerances import Tolerances
from rl2edge.runtime import Policy, load_manifest
from testkit.observations import random_observations


def test_all_modes_make_one_verified_artifact_each(cartpole_all) -> None:
    report, root = cartpole_all  # report.json
    assert [r["mode"] for r in report["files"]] == ["fp32", "fp16", "dynamic", "int8"] == report["modes"]
    assert "| " in (root / "report.md").read_text()
    for row in report["files"]:
        art = root / row["mode"]
        m = load_manifest(art)
        assert {"policy.tflite", "policy.onnx"} <= set(m.data["files"])
        assert m.quantization["mode"] == row["mode"]
        v = m.data["verification"]
        assert v["closed_loop"]["episodes"] == 2 and len(v["closed_loop"]["this_file"]["returns"]) == 2
        assert v["tolerances"]["fp32_action_atol"] == 1e-4
    fp32 = load_manifest(root / "fp32").data
    assert fp32["verification"]["tflite_vs_source"]["disagreements_outside_ties"] == 0
    assert fp32["verification"]["onnx_vs_source"]["agreement"] == 1.0
    int8 = load_manifest(root / "int8").data
    # flat observations: normalization and head in float32 around an int8 network
    assert int8["model"]["input"]["dtype"] == "float32" and "SUB" in int8["quantization"]["float_ops"]["ops"]
    assert int8["quantization"]["calibration"]["source"].startswith("rollouts of the trained policy")
    assert int8["quantization"]["calibration"]["calibration"]["samples"] > 10
    assert fp32["folded"]["normalization"]["enabled"] and any(fp32["folded"]["normalization"]["mean"])


def _fc_weight_dtypes(model: Path) -> list[str]:
    """The weight dtype of each FULLY_CONNECTED op, in execution order."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(model))
    dtypes = {t["index"]: t["dtype"].__name__ for t in interp.get_tensor_details()}
    return [dtypes[op["inputs"][1]] for op in interp._get_ops_details() if op["op_name"] == "FULLY_CONNECTED"]


def test_int8_keeps_input_and_output_layers_float_and_quantizes_the_hidden_ones(
    cartpole_all, rainbow_int8
) -> None:
    """The normalized observation would share one per-tensor int8 scale across features, and the output
    layer's int8 scale would round away the gaps between actions; both layers are float32, the hidden ones
    int8 (export/tflite_convert.py). Rainbow: its two output layers (value, advantage) and the C51 head."""
    import tensorflow as tf

    _, root = cartpole_all
    assert _fc_weight_dtypes(root / "int8" / "policy.tflite") == ["float32", "int8", "float32"]
    assert _fc_weight_dtypes(root / "fp32" / "policy.tflite") == ["float32"] * 3
    assert "output layers" in load_manifest(root / "int8").data["quantization"]["float_ops"]["layers"]
    rainbow = rainbow_int8[1] / "policy.tflite"
    assert sorted(_fc_weight_dtypes(rainbow)) == ["float32"] * 3 + ["int8"] * 2  # trunk input, 2 outputs
    interp = tf.lite.Interpreter(model_path=str(rainbow))
    dtypes = {t["index"]: t["dtype"].__name__ for t in interp.get_tensor_details()}
    head = {op["op_name"]: dtypes[op["inputs"][0]] for op in interp._get_ops_details()}
    assert head["SOFTMAX"] == head["SUM"] == head["ARG_MAX"] == "float32"


def test_continuous_fp32_tflite_matches_torch_within_1e_4(pendulum_run: Path, pendulum_fp32) -> None:
    """Normalization and action unscaling are folded in: raw observation in, action in [-2, 2] out."""
    _, art = pendulum_fp32
    m = load_manifest(art).data
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    assert m["folded"]["action_transform"]["half_range"] == [2.0]
    assert m["folded"]["normalization"]["enabled"] and any(m["folded"]["normalization"]["mean"])
    source = source_from_checkpoint(pendulum_run).policy
    policy = Policy.load(art)
    obs = random_observations("Pendulum-v1", 300, seed=123)  # not the export's own held-out data
    with torch.no_grad():
        expected = source(torch.as_tensor(obs)).numpy()
    got = np.stack([policy.predict(o) for o in obs])
    assert np.abs(got - expected).max() <= 1e-4
    assert np.abs(expected).max() > 0.01  # a policy that does something, so the check means something


def test_continuous_int8_dequantizes_output_and_stays_in_bounds(pendulum_int8) -> None:
    _, art = pendulum_int8
    m = load_manifest(art).data
    assert m["model"]["output"]["dtype"] == "float32" and m["quantization"]["float_ops"]
    parity = m["verification"]["tflite_vs_source"]
    assert parity["metric"] == "abs_error" and parity["max_abs_error"] < 0.5
    policy = Policy.load(art)
    for o in random_observations("Pendulum-v1", 50, seed=5):
        a = policy.predict(o)
        assert a.shape == (1,) and -2.0 <= float(a[0]) <= 2.0


def test_fp32_beyond_tolerance_fails_and_writes_nothing(pendulum_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "strict"
    opts = ExportOptions(
        quantize="fp32",
        calib_episodes=1,
        eval_episodes=1,
        progress=False,
        tolerances=Tolerances(fp32_action_atol=0.0),
    )
    with pytest.raises(ToleranceError, match="exceeds atol 0"):
        export_path(pendulum_run, out, opts)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary or partial directory left behind


def test_existing_artifact_is_not_overwritten_without_force(cartpole_all, cartpole_run: Path) -> None:
    _, root = cartpole_all
    before = (root / "int8" / "manifest.json").read_bytes()
    with pytest.raises(ConfigError, match="--force"):
        export_path(cartpole_run, root, ExportOptions(quantize="fp32", progress=False))
    assert (root / "int8" / "manifest.json").read_bytes() == before


def test_onnx_file_runs_through_the_runtime_too(cartpole_run, cartpole_all) -> None:
    """Two engines: the same action wherever the source's top-two logits are not a near tie (the export's
    own rule, `Tolerances.discrete_margin`), on any CPU."""
    _, root = cartpole_all
    tfl, onx = Policy.load(root / "fp32"), Policy.load(root / "fp32", backend="onnxruntime")
    assert onx.backend_name == "onnxruntime"
    obs = random_observations("CartPole-v1", 200, seed=9)
    decisive = source_from_checkpoint(cartpole_run).margins(obs) >= Tolerances().discrete_margin
    assert decisive.mean() > 0.9  # the rule leaves nearly all of them to compare
    a, b = np.array([tfl.predict(o) for o in obs]), np.array([onx.predict(o) for o in obs])
    assert np.array_equal(a[decisive], b[decisive])


@pytest.mark.integration  # 40 s: the integration tier, which CI runs too
def test_image_observations_export_nchw_torch_nhwc_tflite(tmp_path: Path) -> None:
    """A Nature-CNN on 84x84x4 frames as the env gives them (HWC): the torch graph and its ONNX file take
    NCHW, onnx2tf makes the TFLite input NHWC, the manifest says so, and the runtime takes the env's frame.
    Its int8 file is integer end to end: the runtime quantizes the frame with the model's own parameters.
    Its float files (fp32, fp16, dynamic) take the uint8 frame itself and cast it inside the graph."""
    from benchmarks.synthetic import FrameEnv, synthetic_source
    from rl2edge.export.pipeline import export_source

    source = synthetic_source("cnn")
    export_source(
        source,
        tmp_path / "cnn",
        ExportOptions(quantize="all", calib_episodes=1, eval_episodes=1, progress=False),
    )
    m = load_manifest(tmp_path / "cnn" / "int8").data
    assert m["observation"]["layout"] == "HWC" and m["observation"]["shape"] == [84, 84, 4]
    assert m["model"]["input"]["layout"] == "NHWC" and m["model"]["input"]["shape"] == [1, 84, 84, 4]
    assert m["onnx"]["input_layout"] == "NCHW"
    env = FrameEnv()
    frames = [env.reset(seed=s)[0] for s in range(20)]
    expected = source.deployable_actions(np.stack(frames))
    assert m["model"]["input"]["dtype"] == "int8" and m["model"]["input"]["quantization"]["scale"] > 0
    # An untrained CNN: compare only where the source's top-two logits are clearly apart, so that the
    # answer holds on any CPU. fp32 ONNX: the export's near-tie rule. int8: a quarter of the logits'
    # spread, some 50 output quantization steps (spread / 255 each) away from a tie.
    stacked = np.stack(frames)
    margins, spread = source.margins(stacked), float(np.ptp(source.pre_head(stacked), axis=1).mean())
    onnx = Policy.load(tmp_path / "cnn" / "int8", backend="onnxruntime")  # the fp32 graph, NCHW
    fp32_decisive = margins >= Tolerances().discrete_margin
    assert fp32_decisive.mean() > 0.9
    assert np.array_equal(np.array([onnx.predict(f) for f in frames])[fp32_decisive], expected[fp32_decisive])
    int8 = Policy.load(tmp_path / "cnn" / "int8")
    # the calibration pins the input's range to the space's 0..255: scale 1, zero point -128, so uint8
    # frames pass as their bits shifted by 128, the same integers the float path quantizes them to
    quant = m["model"]["input"]["quantization"]
    assert (quant["scale"], quant["zero_point"]) == (1.0, -128)
    for f in frames:
        assert np.array_equal(int8.model_input(f), int8.model_input(f.astype(np.float32)))
    assert int8.model_input(frames[0]).dtype == np.int8
    decisive = margins >= 0.25 * spread
    assert decisive.mean() >= 0.5, (margins, spread)
    assert np.array_equal(np.array([int8.predict(f) for f in frames])[decisive], expected[decisive])
    _check_uint8_float_files(tmp_path / "cnn", frames, expected, fp32_decisive, decisive)


def _check_uint8_float_files(
    root: Path,
    frames: list[np.ndarray],
    expected: np.ndarray,
    fp32_decisive: np.ndarray,
    decisive: np.ndarray,
) -> None:
    """The float files of a uint8 space: a uint8 input whose first op casts it to float32 (exact for every
    uint8 value), so predict passes the frame as it is. Frames given as floats (a PLC's REAL nodes) become
    the same integers; values outside 0..255 are clipped, as the int8 file's input quantization clips
    them, never wrapped around."""
    import tensorflow as tf

    for mode, agree_on in (("fp32", fp32_decisive), ("fp16", decisive), ("dynamic", decisive)):
        m = load_manifest(root / mode).data
        assert m["model"]["input"]["dtype"] == "uint8" and m["model"]["input"]["quantization"] is None, mode
        interp = tf.lite.Interpreter(model_path=str(root / mode / "policy.tflite"))
        obs_index = interp.get_input_details()[0]["index"]
        readers = [op for op in interp._get_ops_details() if obs_index in op["inputs"]]
        assert [op["op_name"] for op in readers] == ["CAST"], (mode, readers)
        assert interp.get_tensor_details()[readers[0]["outputs"][0]]["dtype"] == np.float32
        policy = Policy.load(root / mode)
        assert policy.model_input(frames[0]).dtype == np.uint8
        actions = np.array([policy.predict(f) for f in frames])
        assert np.array_equal(actions[agree_on], expected[agree_on]), mode
        as_float = np.array([policy.predict(f.astype(np.float32)) for f in frames])
        assert np.array_equal(as_float, actions), mode
        assert np.array_equal(policy.model_input(frames[0].astype(np.float32) + 0.3), frames[0][None])
        for beyond, edge in ((-1.0, 0), (256.6, 255)):
            x = policy.model_input(np.full(frames[0].shape, beyond, np.float32))
            assert np.array_equal(x, np.full(x.shape, edge, np.uint8)), (mode, beyond)
