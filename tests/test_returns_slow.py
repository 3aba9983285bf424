"""Full-length runs: the published returns, for the trained policy and its int8 artifact. `make test-all`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import tiny_train


@pytest.mark.slow
def test_cartpole_ppo_and_its_int8_artifact_reach_475(tmp_path: Path) -> None:
    from export.pipeline import ExportOptions, export_checkpoint
    from runtime import Policy
    from train.core.evaluation import evaluate

    # the CLI's configuration: periodic evaluation on, so keep_best checkpoints the best policy
    run = tiny_train(
        "CartPole-v1", tmp_path / "run", steps=100_000, seed=0, eval_freq=10_000, eval_episodes=5
    )
    export_checkpoint(run, tmp_path / "art", ExportOptions(quantize="int8", eval_episodes=5, progress=False))
    result = evaluate(Policy.load(tmp_path / "art").predict, "CartPole-v1", 20, 0)
    assert result.mean >= 475, result.returns


@pytest.mark.slow
def test_tf_cartpole_ppo_and_its_int8_artifact_reach_475(tmp_path: Path) -> None:
    from export.pipeline import ExportOptions, export_checkpoint
    from runtime import Policy
    from train.core.config import build_config
    from train.core.evaluation import evaluate
    from train.tf_backend.ppo import train_ppo

    run = tmp_path / "run"
    run.mkdir()
    result = train_ppo(
        "CartPole-v1",
        build_config("CartPole-v1", overrides={"eval_episodes": 20}),
        0,
        run,
        device="cpu",
        progress=False,
    )
    assert result.final_eval.mean >= 475
    export_checkpoint(run, tmp_path / "art", ExportOptions(quantize="int8", eval_episodes=5, progress=False))
    assert evaluate(Policy.load(tmp_path / "art").predict, "CartPole-v1", 20, 0).mean >= 475
