"""The runtime refuses artifacts and observations that do not check out, with a clear message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ManifestError, ObservationError
from runtime import Policy


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
