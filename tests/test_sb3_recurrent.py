"""sb3-contrib's RecurrentPPO (MlpLstmPolicy) imported with its VecNormalize statistics: the exported files
against sb3-contrib's own `predict(obs, state, episode_start, deterministic=True)` over whole episodes,
the state carried on both sides and reset at each episode's start.

Tolerances: the export's fp32 criterion. Discrete: no disagreement where the exported graph's two best
logits are at least 1e-4 apart (a briefly trained net has near ties, which any float reordering may
flip). Box: max |action difference| <= 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sb3_contrib")

from rl2edge.export.calibration import collect_rollout_data
from rl2edge.export.pipeline import ExportOptions, export_source
from rl2edge.export.sources.sb3 import source_from_sb3
from rl2edge.runtime.policy import Policy

pytestmark = pytest.mark.integration  # sb3-contrib training runs and TFLite conversions

CASES = {
    "discrete": ("CartPoleNoVel-v1", 2048),
    "box": ("PendulumNoVel-v1", 1024),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def recurrent_zip(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    import rl2edge.train.core.envs  # noqa: F401  registers the NoVel ids

    env_id, steps = CASES[request.param]
    root = tmp_path_factory.mktemp(f"rppo-{request.param}")
    venv = VecNormalize(make_vec_env(env_id, n_envs=4, seed=0), norm_reward=False)
    model = RecurrentPPO(
        "MlpLstmPolicy", venv, n_steps=64, batch_size=128, n_epochs=4, seed=0, device="cpu",
        policy_kwargs={"lstm_hidden_size": 32, "net_arch": [32]},
    )  # fmt: skip
    model.learn(steps)
    model.save(root / "model.zip")
    venv.save(str(root / "vecnormalize.pkl"))
    return env_id, root


def test_imported_files_act_as_sb3_contrib_predicts_over_20_episodes(recurrent_zip) -> None:
    env_id, root = recurrent_zip
    source = source_from_sb3(root / "model.zip", env_id, root / "vecnormalize.pkl")
    assert [t.name for t in source.states] == ["lstm_h_0", "lstm_c_0"]
    report = export_source(
        source, root / "art", ExportOptions(quantize="all", calib_episodes=2, eval_episodes=3, progress=False)
    )
    assert {r.mode for r in report.rows} == {"fp32", "fp16", "dynamic", "int8"}
    # 20 whole episodes of sb3-contrib's own policy, its predict carrying its state (no minimum of samples:
    # exactly the 20)
    data = collect_rollout_data(
        source.act, env_id, 20, 500, 100_000, 100_000, on_reset=source.reset, min_calib=1, min_heldout=1
    )
    obs, starts = data.calibration, data.calibration_starts
    assert starts.sum() == 20
    reference = source.reference_trajectory(obs, starts)
    pre_head = source.trajectory(obs, starts).pre_head
    served = Policy.load(root / "art" / "fp32")
    got = []
    for o, start in zip(obs, starts, strict=True):
        if start:
            served.reset()
        got.append(served.predict(o))
    got_arr = np.asarray(got).reshape(reference.shape)
    if source.discrete:
        top2 = np.sort(pre_head, axis=-1)[:, -2:]
        decisive = top2[:, 1] - top2[:, 0] >= 1e-4
        assert decisive.mean() > 0.9
        assert int((got_arr != reference)[decisive].sum()) == 0
    else:
        assert np.abs(got_arr - reference).max() <= 1e-4
    # int8: within the export's return criterion, as the manifest records it
    m = json.loads((root / "art" / "int8" / "manifest.json").read_text())
    assert m["source"]["algo"] == "recurrent_ppo" and m["source"]["policy"] == "RecurrentActorCriticPolicy"
    assert m["state"]["tensors"][0]["name"] == "lstm_h_0"
    closed = m["verification"]["closed_loop"]
    scale = max(abs(closed["fp32"]["mean_return"]), 1.0)
    assert abs(closed["this_file"]["mean_return"] - closed["fp32"]["mean_return"]) <= 0.05 * scale


def test_a_rate_limited_import_follows_sb3_contribs_predict_through_the_limit(recurrent_zip) -> None:
    """--max-action-rate on an imported RecurrentPPO: the reference is sb3-contrib's own predict with its
    state carried, then the limit; the fp32 file reproduces it over whole episodes (max |delta| <= 1e-4,
    as above; a limit of 2.5e-4 per step, below the barely trained policy's own steps). A Discrete import
    is refused."""
    from rl2edge.errors import ExportError
    from rl2edge.export.rate_limit import limit_sequence

    env_id, root = recurrent_zip
    source = source_from_sb3(root / "model.zip", env_id, root / "vecnormalize.pkl")
    opts = ExportOptions(
        quantize="fp32",
        calib_episodes=2,
        eval_episodes=2,
        progress=False,
        max_action_rate="0.005",
        period_ms=50,
    )
    if source.discrete:
        with pytest.raises(ExportError, match="Discrete"):
            export_source(source, root / "limited", opts)
        return
    export_source(source, root / "limited", opts)
    assert [t.name for t in source.states] == ["lstm_h_0", "lstm_c_0", "prev_action"]
    data = collect_rollout_data(source.act, env_id, 3, 700, 100_000, 100_000, on_reset=source.reset)
    obs, starts = data.calibration, data.calibration_starts
    reference = source.reference_trajectory(obs, starts)
    own = np.asarray(source.stateful_reference.trajectory(obs, starts))  # sb3-contrib's, unlimited
    np.testing.assert_array_equal(reference, limit_sequence(own, starts, source.max_step))
    assert not np.allclose(reference, own, atol=1e-3), "the limit should bind, or this shows nothing"
    served, got = Policy.load(root / "limited"), []
    for o, start in zip(obs, starts, strict=True):
        if start:
            served.reset()
        got.append(served.predict(o))
    assert np.abs(np.asarray(got).reshape(reference.shape) - reference).max() <= 1e-4


def test_a_multi_input_lstm_policy_is_refused_in_one_line(tmp_path: Path, capfd) -> None:
    from sb3_contrib import RecurrentPPO

    from rl2edge.cli.app import main
    from rl2edge.train.core.envs import make_env

    agv = "examples.agv:AgvDictEnv"
    model = RecurrentPPO("MultiInputLstmPolicy", make_env(agv), n_steps=16, batch_size=16, device="cpu")
    model.save(tmp_path / "m.zip")
    assert main(["export", str(tmp_path / "m.zip"), "--env", agv, "--out", str(tmp_path / "art")]) == 2
    last = capfd.readouterr().err.strip().splitlines()[-1]
    assert "MultiInputLstmPolicy (RecurrentMultiInputActorCriticPolicy) is not supported yet" in last
    assert not (tmp_path / "art").exists()
