"""The runtime refuses artifacts and observations that do not check out, with a clear message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ManifestError, ObservationError
from rl2edge.runtime import Policy


@pytest.fixture
def artifact(cartpole_all, tmp_path: Path) -> Path:
    _, root = cartpole_all
    dst = tmp_path / "art"
    shutil.copytree(root / "int8", dst)
    return dst


def test_tampered_model_is_refused(artifact: Path) -> None:
    model = artifact / "policy.tflite"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match="does not match its sha256"):
        Policy.load(artifact)


def test_missing_file_and_unknown_schema_are_refused(artifact: Path) -> None:
    manifest = json.loads((artifact / "manifest.json").read_text())
    (artifact / "policy.onnx").unlink()
    with pytest.raises(ManifestError, match="missing"):
        Policy.load(artifact)
    manifest["schema_version"] = 99
    (artifact / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="schema_version 99"):
        Policy.load(artifact)
    (artifact / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        Policy.load(artifact)


def test_not_an_artifact_points_to_the_mode_directories(cartpole_all) -> None:
    _, root = cartpole_all
    with pytest.raises(ManifestError, match="one artifact per mode"):
        Policy.load(root)


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        (np.zeros(3, np.float32), "shape"),
        (np.zeros((2, 4), np.float32), "shape"),
        (np.array([0.0, np.nan, 0.0, 0.0]), "NaN or Inf"),
        (np.array([0.0, np.inf, 0.0, 0.0]), "NaN or Inf"),
        (np.array(["a", "b", "c", "d"]), "not numeric"),
    ],
)
def test_bad_observations_are_refused(artifact: Path, obs: np.ndarray, message: str) -> None:
    policy = Policy.load(artifact)
    with pytest.raises(ObservationError, match=message):
        policy.predict(obs)


def test_predict_accepts_env_dtypes_and_a_batch_of_one(artifact: Path) -> None:
    policy = Policy.load(artifact)
    a = policy.predict(np.zeros(4, np.float64))
    assert isinstance(a, int) and a in (0, 1)
    assert policy.predict(np.zeros((1, 4), np.float32)) == a
    assert policy.predict([0, 0, 0, 0]) == a


@pytest.mark.parametrize("mode", ["fp32", "int8"])
def test_validated_predict_is_predict_without_the_checks(cartpole_all, mode: str) -> None:
    # The serve loop checks observations itself and skips predict's own checks: the same input bytes
    # reach the same interpreter, so the actions are equal exactly.
    _, root = cartpole_all
    policy = Policy.load(root / mode)
    obs = np.random.default_rng(0).uniform(-0.3, 0.3, size=(200, 4))
    assert [policy.predict(o, validated=True) for o in obs] == [policy.predict(o) for o in obs]
    assert np.array_equal(policy.raw(obs[0], validated=True), policy.raw(obs[0]))


@pytest.mark.parametrize("mode", ["fp32", "fp16", "int8"])
def test_tflite_runtime_serves_what_litert_serves(
    cartpole_all, pendulum_int8, pendulum_fp32, mode: str
) -> None:
    """The [edge-tflite] interpreter (tflite-runtime 2.14) against ai-edge-litert 2.1 on the same files.
    Two engines: never bit equality. Discrete (argmax inside the graph, so margins are not visible): the
    fp32 kernels differ in the last bits at most, which flips only near-exact ties: >= 99% agreement.
    Box: 1e-4 of the action range for float files (float32 rounding through 3 layers, x100 margin); 2% for
    int8 (one requantization step of a hidden layer, carried through the float head)."""
    pytest.importorskip("tflite_runtime", reason="the [edge-tflite] interpreter is not installed")
    from rl2edge.runtime import load_manifest
    from rl2edge.runtime.bench import artifact_observations

    arts = {"discrete": cartpole_all[1] / mode}
    if mode != "fp16":
        arts["box"] = (pendulum_int8 if mode == "int8" else pendulum_fp32)[1]
    for kind, art in arts.items():
        obs = artifact_observations(load_manifest(art).observation, 1000)
        litert, tflite = Policy.load(art, backend="litert"), Policy.load(art, backend="tflite-runtime")
        a = np.array([litert.predict(o) for o in obs], np.float64)
        b = np.array([tflite.predict(o) for o in obs], np.float64)
        if kind == "discrete":
            assert (a == b).mean() >= 0.99
        else:
            span = float(np.max(litert.action_high - litert.action_low))
            assert np.abs(a - b).max() <= (0.02 if mode == "int8" else 1e-4) * span


def test_tflite_runtime_names_what_it_cannot_load(cartpole_all) -> None:
    """TFLite 2.14 lacks the FULLY_CONNECTED version that TF 2.19's dynamic-range files use."""
    from rl2edge.errors import BackendError

    pytest.importorskip("tflite_runtime", reason="the [edge-tflite] interpreter is not installed")
    with pytest.raises(BackendError, match=r"tflite-runtime cannot load .*dynamic"):
        Policy.load(cartpole_all[1] / "dynamic", backend="tflite-runtime")


def test_the_manifest_gives_typed_specs_parsed_once() -> None:
    """The manifest's observation and action JSON is parsed at the file boundary into the typed specs the
    runtime and the bridge use; their JSON is what the manifest holds. Bounds left out or [] are unbounded."""
    from rl2edge.runtime.manifest import Manifest
    from rl2edge.specs import ActionSpec, ObservationSpec

    obs = {"type": "box", "shape": [2], "dtype": "float32", "low": [], "high": [1.0, None], "layout": "flat"}
    discrete = {"type": "discrete", "n": 3, "start": -1}
    m = Manifest(Path("art"), {"observation": obs, "action": discrete})
    assert isinstance(m.observation, ObservationSpec) and m.observation is m.observation  # parsed once
    assert m.observation.to_json() == obs and m.action.to_json() == discrete
    assert m.observation.bounds == ((None, None), (1.0, None))
    assert isinstance(m.action, ActionSpec) and m.action.index_range == (-1, 1) and m.action.size == 1
