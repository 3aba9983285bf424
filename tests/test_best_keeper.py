"""The kept checkpoint is chosen honestly: a periodic evaluation of a few episodes only nominates a policy;
20 episodes on seeds of their own confirm it before it replaces the kept one, and the last policy is
confirmed the same way at the end (issue 63: a recurrent run kept 500.0 from 5 lucky episodes of a policy
that returned 154.6 over 20)."""

from __future__ import annotations

import json
from pathlib import Path

from rl2edge.train.core.evaluation import EvalResult
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.run import CONFIRM_EPISODES, BestKeeper


class Weights:
    """What BestKeeper copies from an agent: the weights of the moment (get_state)."""

    def __init__(self) -> None:
        self.step = 0

    def get_state(self) -> dict[str, int]:
        return {"step": self.step}


def _result(mean: float, episodes: int) -> EvalResult:
    return EvalResult([mean] * episodes, [100] * episodes)


def test_a_lucky_evaluation_nominates_and_the_confirmation_decides() -> None:
    keeper, agent, norm = BestKeeper(True), Weights(), RunningNormalizer((4,))
    confirmed_at = {10_000: 154.0, 50_000: 440.0, 80_000: 400.0, 90_000: 470.0}
    asked: list[int] = []

    def offer(step: int, periodic: float) -> None:
        agent.step = step

        def confirm() -> EvalResult:
            asked.append(step)
            return _result(confirmed_at[step], CONFIRM_EPISODES)

        keeper.offer(_result(periodic, 5), step, agent, norm, confirm)

    offer(10_000, 500.0)  # lucky: the maximum a periodic evaluation can show
    offer(50_000, 300.0)  # above the kept one's confirmed 154: nominated, confirmed 440: kept
    offer(80_000, 500.0)  # lucky again, confirmed 400: not kept
    offer(90_000, 420.0)  # not above the kept one's confirmed 440: no confirmation is run
    assert asked == [10_000, 50_000, 80_000]
    assert keeper.best is not None
    assert (keeper.best.step, keeper.best.state, keeper.best.nominated) == (50_000, {"step": 50_000}, 300.0)
    assert keeper.best.confirmed.mean == 440.0 and len(keeper.best.confirmed.returns) == CONFIRM_EPISODES


def test_a_run_reports_both_confirmed_returns(tmp_path: Path) -> None:
    """A real short run with periodic evaluations: summary.json says which policy was kept and what both
    confirmations measured, and the kept one is the higher."""
    from rl2edge.train.algos import build_config, train

    cfg = build_config(
        "CartPole-v1", overrides={"n_timesteps": 4096, "eval_freq": 1024, "eval_episodes": 2}, algo="ppo"
    )
    train("torch", "CartPole-v1", cfg, 0, tmp_path, device="cpu", progress=False)
    kept = json.loads((tmp_path / "summary.json").read_text())["checkpoint"]
    assert kept["confirm_episodes"] == CONFIRM_EPISODES
    best, last = kept["best_confirmed_return"], kept["last_confirmed_return"]
    assert kept["kept"] == ("best" if best > last else "last"), kept
    if kept["kept"] == "best":
        assert kept["step"] < 4096 and "nominated_by" in kept, kept
