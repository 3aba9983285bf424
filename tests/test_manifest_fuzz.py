"""The artifact is a closed box and the manifest loader never crashes: named attacks (paths out of the
folder, symlinks, a huge or deeply nested manifest, out-of-range fields) and 10,000 random mutations of
a valid manifest each end in a loaded Policy or one ManifestError/BackendError line, never another
exception."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl2edge.errors import ManifestError, Rl2EdgeError
from rl2edge.runtime import Policy
from rl2edge.runtime.manifest_schema import MAX_MANIFEST_BYTES
from testkit.fuzz import ODD_SCALARS, mutate


@pytest.fixture
def artifact(cartpole_all, tmp_path: Path) -> Path:
    dst = tmp_path / "art"
    shutil.copytree(cartpole_all[1] / "int8", dst)
    return dst


def _rewrite(art: Path, change: Any) -> None:
    manifest = json.loads((art / "manifest.json").read_text())
    change(manifest)
    (art / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["model"].update(file="../policy.tflite"), "model.file: must be a bare file name"),
        (lambda m: m["model"].update(file="/etc/passwd"), "model.file: must be a bare file name"),
        (lambda m: m["files"].update({"/etc/passwd": "0" * 64}), "must be a bare file name"),
        (lambda m: m["action"].update(n=0), "action.n: must be an integer from 1"),
        (lambda m: m["action"].update(n="two"), "action.n: must be an integer"),
        (lambda m: m["observation"].update(shape="abc"), "observation.shape: must be a list"),
        (lambda m: m.update(observation=None), "observation: must be an object"),
        (lambda m: m["model"].pop("file"), "model.file: must be a bare file name"),
        (
            lambda m: m["observation"]["low"].__setitem__(0, float("nan")),
            "observation.low[0]: must be a finite",
        ),
    ],
)
def test_malformed_manifests_are_one_line_naming_the_field(artifact: Path, change: Any, message: str) -> None:
    _rewrite(artifact, change)
    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Policy.load(artifact)


def test_no_file_outside_the_artifact_is_read(artifact: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.tflite"
    shutil.copy(artifact / "policy.tflite", outside)
    (artifact / "policy.tflite").unlink()
    (artifact / "policy.tflite").symlink_to(outside)
    with pytest.raises(ManifestError, match="symlink leaving the artifact folder"):
        Policy.load(artifact)


def test_a_huge_or_deeply_nested_manifest_is_refused_unread(artifact: Path) -> None:
    manifest = artifact / "manifest.json"
    manifest.write_bytes(b" " * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(ManifestError, match=r"over the \d+ a manifest may have"):
        Policy.load(artifact)
    manifest.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ManifestError, match=r"nests deeper than 32 levels"):
        Policy.load(artifact)


_ODD_VALUES: list[Any] = [
    *ODD_SCALARS,
    "../../etc/passwd",
    "/etc/passwd",
    [],
    {},
    [1, 2, 3],
    {"a": 1},
    [None],
    -(2**63),
]


@pytest.mark.integration  # 25 s: the integration tier, which CI runs too
def test_ten_thousand_mutated_manifests_load_or_fail_in_one_line(artifact: Path) -> None:
    valid = json.loads((artifact / "manifest.json").read_text())
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(10_000):
        mutated = mutate(valid, rng, _ODD_VALUES)
        (artifact / "manifest.json").write_text(json.dumps(mutated))  # NaN/Infinity as Python writes them
        try:
            policy = Policy.load(artifact)
            policy.predict(np.zeros(policy.obs_shape, np.float32))
            outcomes["loaded"] += 1
        except Rl2EdgeError as exc:
            assert "\n" not in str(exc), (i, str(exc))
            outcomes["refused"] += 1
        except Exception as exc:  # a traceback for the user: the defect this test exists for
            pytest.fail(f"mutation {i} raised {type(exc).__name__}: {exc}\n{json.dumps(mutated)[:2000]}")
    # mutations of fields the runtime only reports (tools, verification figures) still load
    assert outcomes["refused"] > 1_000 and outcomes["loaded"] > 1_000 and sum(outcomes.values()) == 10_000, (
        outcomes
    )
