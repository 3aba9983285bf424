"""docs/own-env.md, walked through as a user would: its shell blocks marked `<!-- run: tests/test_own_env.py -->`
run in order, as written, in one bash (HOME in a temporary folder, the venv's rl2edge and python first on
PATH, plc-sim's port 4840 moved to a free one), then what the page promises is checked on what they left."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from testkit.doc_blocks import ROOT, run_walk_through
from testkit.plc import free_port

DOC = ROOT / "docs/own-env.md"
THIS = "tests/test_own_env.py"


@pytest.mark.integration  # about 40 s: the integration tier, which CI runs too
def test_the_own_env_page_runs_as_written(tmp_path: Path) -> None:
    proc = run_walk_through(DOC, THIS, tmp_path, {":4840": f":{free_port()}"}, 4, timeout=600)
    work = tmp_path / "tank"

    # section 2: --config reached the run, and the page's figure holds (195 of 200; a random valve ~50)
    ckpt = json.loads((work / "runs/tank/checkpoint.json").read_text())
    assert ckpt["env_id"] == "mixing_tank:MixingTank"
    assert ckpt["hyperparameters"]["learning_rate"] == 0.001 and ckpt["hyperparameters"]["n_steps"] == 128
    assert "no ppo preset for mixing_tank:MixingTank" not in proc.stderr  # --config given: no warning
    final = json.loads((work / "runs/tank/summary.json").read_text())["final_eval"]["mean_return"]
    assert final > 150, final

    # section 3: the int8 artifact names its env; evaluate found it without --env
    manifest = json.loads((work / "artifacts/tank/manifest.json").read_text())
    assert manifest["source"]["env_id"] == "mixing_tank:MixingTank"
    assert manifest["quantization"]["mode"] == "int8"
    assert np.allclose(manifest["observation"]["low"], [0.0, 0.4, 0.0])  # the env's float32 bounds

    # section 5, lockstep: no deadline missed, then the same returns over OPC UA as evaluate's
    served = json.loads((work / "serve.json").read_text())
    assert served["deadline_misses"] == 0 and served["invalid"] == 0 and served["stale"] == 0, served
    over_opcua = json.loads((work / "sim.json").read_text())["returns"]
    direct = json.loads((work / "evaluate.json").read_text())
    assert len(over_opcua) == 3 and over_opcua == direct["returns"]
    assert direct["env_id"] == "mixing_tank:MixingTank"

    # section 5, realtime: a plant publishing once a second, served every 20 ms, is never stale
    realtime = json.loads((work / "realtime.json").read_text())
    assert realtime["cycles"] >= 200 and realtime["stale"] == 0 and realtime["invalid"] == 0, realtime


def test_the_example_plant_is_a_fair_test(monkeypatch) -> None:
    """The page's references: the hand-written controller near the 200 maximum, a random valve far below,
    the same episode from the same seed."""
    monkeypatch.syspath_prepend(str(ROOT / "docs/examples/own_env"))
    from mixing_tank import EPISODE_STEPS, MixingTank, proportional_valve

    def returns(policy, seeds=range(10)) -> list[float]:
        env, out = MixingTank(), []
        env.action_space.seed(0)
        for s in seeds:
            obs, _ = env.reset(seed=s)
            total, done = 0.0, False
            while not done:
                obs, r, terminated, truncated, _ = env.step(policy(obs))
                total, done = total + r, terminated or truncated
            out.append(total)
        return out

    env = MixingTank()
    assert np.mean(returns(proportional_valve)) > 0.97 * EPISODE_STEPS
    assert np.mean(returns(lambda o: env.action_space.sample())) < 0.5 * EPISODE_STEPS
    assert returns(proportional_valve, [7]) == returns(proportional_valve, [7])
