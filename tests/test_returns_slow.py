"""Full-length runs: the published returns, for the trained policy and its int8 artifact. `make test-all`."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.runs import tiny_train


@pytest.mark.slow
def test_cartpole_ppo_and_its_int8_artifact_reach_475(tmp_path: Path) -> None:
    from rl2edge.export.pipeline import ExportOptions, export_path
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate

    # the CLI's configuration: periodic evaluation on, so keep_best checkpoints the best policy
    run = tiny_train(
        "CartPole-v1", tmp_path / "run", steps=100_000, seed=0, eval_freq=10_000, eval_episodes=5
    )
    export_path(run, tmp_path / "art", ExportOptions(quantize="int8", eval_episodes=5, progress=False))
    result = evaluate(Policy.load(tmp_path / "art").predict, "CartPole-v1", 20, 0)
    assert result.mean >= 475, result.returns


@pytest.mark.slow
def test_tf_cartpole_ppo_and_its_int8_artifact_reach_475(tmp_path: Path) -> None:
    from rl2edge.export.pipeline import ExportOptions, export_path
    from rl2edge.runtime import Policy
    from rl2edge.train.algos import build_config, train
    from rl2edge.train.core.evaluation import evaluate

    run = tmp_path / "run"
    run.mkdir()
    result = train(
        "tf",
        "CartPole-v1",
        build_config("CartPole-v1", overrides={"eval_episodes": 20}),
        0,
        run,
        device="cpu",
        progress=False,
    )
    assert result.final_eval.mean >= 475
    export_path(run, tmp_path / "art", ExportOptions(quantize="int8", eval_episodes=5, progress=False))
    assert evaluate(Policy.load(tmp_path / "art").predict, "CartPole-v1", 20, 0).mean >= 475


@pytest.mark.slow
@pytest.mark.parametrize(
    "algo,framework,env_id,floor",
    [
        ("sac", "torch", "Pendulum-v1", -200.0),
        ("td3", "tf", "Pendulum-v1", -200.0),
        ("dqn", "torch", "CartPole-v1", 475.0),
        ("dqn", "tf", "CartPole-v1", 475.0),
    ],
)
def test_offpolicy_preset_reaches_the_zoo_and_ships_a_file_that_keeps_it(
    algo: str, framework: str, env_id: str, floor: float, tmp_path: Path
) -> None:
    """The preset at the Zoo's step count, seed 0 (benchmarks/returns.py runs 3 seeds of each). SAC and TD3
    ship int8 within 5 % of the floor; DQN's int8 files can still lose return on some seeds
    (benchmarks/results/returns_dqn_int8.md: TF 357 against 456 over 3 seeds), so `--quantize auto` must
    ship a mode that keeps it."""
    from rl2edge.export.pipeline import ExportOptions, export_path
    from rl2edge.runtime import Policy
    from rl2edge.train.algos import build_config, train
    from rl2edge.train.core.evaluation import evaluate

    run = tmp_path / "run"
    run.mkdir()
    result = train(framework, env_id, build_config(env_id, algo=algo), 0, run, device="cpu", progress=False)
    assert result.final_eval.mean >= floor, result.final_eval.returns
    quantize = "auto" if algo == "dqn" else "int8"
    export_path(run, tmp_path / "art", ExportOptions(quantize=quantize, eval_episodes=5, progress=False))
    shipped = evaluate(Policy.load(tmp_path / "art").predict, env_id, 10, 0).mean
    assert shipped >= floor - 0.05 * abs(floor), shipped
