"""A plant that gives a NaN or inf (an observation, a reward, a relabeled goal's reward), or a run whose losses
overflow, stops `train` through the real main() with one line that says where, exit 2, and --out as it was
(it had printed an evaluation and written an all-NaN checkpoint, exit 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl2edge.cli.app import main
from testkit.nonfinite_envs import AT_STEP


def _train(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, *extra: str, algo: str = "ppo"
) -> tuple[int, str, Path]:
    """train into an --out that already holds a run's file: (exit code, the last stderr line, --out)."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.json").write_text("{}")  # what a previous run left: it must stay
    args = ["train", "--algo", algo, "--env", f"testkit.nonfinite_envs:{env}", "--seed", "0", *extra]
    rc = main([*args, "--out", str(out), "--force", "--no-progress"])
    lines = capsys.readouterr().err.strip().splitlines()
    return rc, lines[-1] if lines else "", out


def _kept(out: Path) -> bool:
    return [p.name for p in out.iterdir()] == ["checkpoint.json"] and not list(out.parent.glob(".run*"))


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ("NanObservationCartPole", "returned a non-finite observation (index 3: nan)"),
        ("InfRewardCartPole", "returned a non-finite reward (inf)"),
        ("NanKeyDictCartPole", "returned a non-finite observation (key 'cart', index 1: nan)"),
    ],
)
def test_a_non_finite_value_from_the_env_stops_training_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, fragment: str
) -> None:
    rc, last, out = _train(tmp_path, capsys, env, "--steps", "20000")
    assert rc == 2, last
    assert last.startswith("rl2edge train: error: env testkit.nonfinite_envs:") and fragment in last, last
    assert f"(copy 0) step() at its step {AT_STEP} returned" in last, last
    assert "--out is as it was" in last and _kept(out)


def test_losses_that_overflow_stop_training_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rewards of 1e30 are finite, but the value loss is not (float32 tops out at 3.4e38)."""
    rc, last, out = _train(tmp_path, capsys, "HugeRewardCartPole", "--steps", "4096")
    assert rc == 2 and "training diverged: value_loss is" in last and "at step" in last, last
    assert _kept(out)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ("NanGoalRewardPointReach", "the env's compute_reward (on HER's relabeled goals) returned a non-finite reward (nan"),
        ("ScalarRewardPointReach", "the env's compute_reward gave 1 reward(s) for a batch of"),
    ],
)  # fmt: skip
def test_her_rewards_that_are_not_one_finite_value_per_goal_stop_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, fragment: str
) -> None:
    (tmp_path / "hp.yml").write_text("replay_buffer_class: HerReplayBuffer\nlearning_starts: 100\n")
    config = ["--steps", "400", "--config", str(tmp_path / "hp.yml")]
    rc, last, out = _train(tmp_path, capsys, env, *config, algo="sac")
    assert rc == 2 and fragment in last, last
    assert _kept(out)


def test_weights_that_hold_nan_are_never_written() -> None:
    """The last guard, before any file is written: whatever slipped past the data and loss checks."""
    import numpy as np
    import torch

    from rl2edge.errors import TrainingError
    from rl2edge.train.core.finite_check import check_weights

    check_weights({"w": torch.ones(3)})
    check_weights([np.ones(3, np.float32), np.arange(3)])
    with pytest.raises(TrainingError, match=r"the trained weights hold nan \(parameter 'pi.bias'\)"):
        check_weights({"w": torch.ones(3), "pi.bias": torch.tensor([0.0, float("nan")])})
    with pytest.raises(TrainingError, match=r"hold inf \(parameter 1\)"):
        check_weights([np.ones(2), np.array([np.inf])])


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ("OldApiCartPole", "step() at its step 1 returned 4 values (the old gym API: obs, reward, done, info)"),
        ("RaisingCartPole", "step() at its step 4 raised RuntimeError: the valve model did not converge"),
        ("WideCartPole", "reset() at its step 0 returned an observation of shape [5], and its observation_space declares [4]"),
        ("WideKeyDictCartPole", "returned an observation key 'cart' of shape [3], and its observation_space declares [2]"),
    ],
)  # fmt: skip
def test_an_env_that_answers_wrong_stops_training_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, fragment: str
) -> None:
    """What had been a traceback from inside gymnasium ("Output array is the wrong shape", "not enough values
    to unpack") names the env, the copy, the call and what was wrong."""
    out = tmp_path / "run"
    args = [
        "train",
        "--algo",
        "ppo",
        "--env",
        f"testkit.broken_envs:{env}",
        "--steps",
        "256",
        "--out",
        str(out),
    ]
    assert main([*args, "--no-progress"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"env testkit.broken_envs:{env} (copy 0) " in last and fragment in last, last
    assert not out.exists()


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("def broken(:\n", "raises SyntaxError when imported"),
        ("import sys\nsys.exit(3)\n", "exits (3) when imported"),
        ("raise RuntimeError('no licence server')\n", "raises RuntimeError when imported: no licence server"),
    ],
)
def test_an_env_module_that_fails_as_it_loads_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    source: str,
    fragment: str,
) -> None:
    (tmp_path / "my_plant.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    assert (
        main(["train", "--env", "my_plant:Plant", "--steps", "256", "--out", str(out), "--no-progress"]) == 2
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "module 'my_plant' of env 'my_plant:Plant'" in last and fragment in last, last
    assert not out.exists()


def test_an_env_whose_episodes_never_end_is_evaluated_within_a_cap_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No termination and no time limit: training's periodic evaluation had hung with nothing printed."""
    from rl2edge.train.core.evaluation import UNLIMITED_EPISODE_CAP, evaluate

    result = evaluate(lambda obs: 0, "testkit.broken_envs:EndlessCartPole", 2, 0)
    assert result.lengths == [UNLIMITED_EPISODE_CAP] * 2
    warned = [r.getMessage() for r in caplog.records if "without ending" in r.getMessage()]
    assert len(warned) == 1 and "wrap the env in gymnasium.wrappers.TimeLimit" in warned[0], warned
