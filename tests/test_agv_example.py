"""examples/agv/README.md's walk-through, run as written on a small budget: train the Dict AGV, export it
to int8, evaluate it, and serve it over OPC UA against plc-sim's per-key array nodes with the example's
node map. About a minute: the integration tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.doc_blocks import ROOT, run_walk_through
from testkit.plc import free_port

DOC = ROOT / "examples/agv/README.md"
THIS = "tests/test_agv_example.py"
CONFIG = "--config $PYTHONPATH/examples/agv/ppo.yml"


@pytest.mark.integration
def test_the_agv_walk_through_runs_as_written(tmp_path: Path) -> None:
    run_walk_through(DOC, THIS, tmp_path, {":4840": f":{free_port()}", CONFIG: f"{CONFIG} --steps 8192"}, 4)
    work = tmp_path / "agv"

    ckpt = json.loads((work / "runs/agv/checkpoint.json").read_text())
    assert [k["name"] for k in ckpt["observation_space"]["keys"]] == ["lidar", "imu", "goal", "speed"]
    manifest = json.loads((work / "artifacts/agv/manifest.json").read_text())
    assert manifest["quantization"]["mode"] == "int8"
    assert {k["name"]: k["unit"] for k in manifest["observation"]["keys"]} == {
        "lidar": "m",
        "imu": "m/s2, rad/s",
        "goal": "m, -, -",
        "speed": "m/s",
    }
    served = json.loads((work / "serve.json").read_text())
    assert served["deadline_misses"] == 0 and served["invalid"] == 0 and served["stale"] == 0, served
    over_opcua = json.loads((work / "sim.json").read_text())["returns"]
    direct = json.loads((work / "evaluate.json").read_text())["returns"]
    assert len(over_opcua) == 3 and over_opcua == direct
