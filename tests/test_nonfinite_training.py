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
        ("NanObservationCartPole", "non-finite observation (index 3: nan) from step()"),
        ("InfRewardCartPole", "non-finite reward (inf) from step()"),
        ("NanKeyDictCartPole", "non-finite observation (key 'cart', index 1: nan) from step()"),
    ],
)
def test_a_non_finite_value_from_the_env_stops_training_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, fragment: str
) -> None:
    rc, last, out = _train(tmp_path, capsys, env, "--steps", "20000")
    assert rc == 2, last
    assert last.startswith("rl2edge train: error: env testkit.nonfinite_envs:") and fragment in last, last
    assert "(copy 0) returned" in last and f"at its step {AT_STEP}" in last, last
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
