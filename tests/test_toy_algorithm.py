"""docs/architecture.md's recipe, followed by a test: a new algorithm (testkit.toy_algorithm: Expected SARSA
on DQN's networks, with a network type of its own) added from its row, its config, one agent module per
backend and its preset alone trains, exports and serves through the real `rl2edge` commands. Nothing
else in the code base knows its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl2edge.cli.app import main
from rl2edge.runtime import Policy
from rl2edge.train import algos
from rl2edge.train.core.evaluation import evaluate
from testkit.plc import NO_MISS, free_port, running, start, stop, wait_for_server

PRESET = """\
CartPole-v1:
  n_timesteps: 3000
  learning_starts: 500
  exploration_fraction: 0.5
  target_update_interval: 500
  train_freq: 4
  batch_size: 64
  net_arch: [32, 32]
  eval_freq: 0
"""


@pytest.fixture
def toy_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> algos.Algo:
    preset = tmp_path / "esarsa.yml"
    preset.write_text(PRESET)
    row = algos.Algo(
        "esarsa",
        "testkit.toy_algorithm:ExpectedSarsaConfig",
        {
            "torch": "testkit.toy_algorithm.torch_agent:TorchExpectedSarsa",
            "tf": "testkit.toy_algorithm.tf_agent:TFExpectedSarsa",
        },
        ("discrete",),
        "argmax",
        network="esarsa_mlp",
        on_policy=False,  # the off-policy driver, as every replay-based row has
        preset=str(preset),
    )
    monkeypatch.setitem(algos.ALGOS, row.name, row)
    return row


def _train_steps_taken(row: algos.Algo, framework: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the toy agent's own gradient-step calls (its expected target, not DQN's)."""
    cls = row.agent_class(framework)
    own = "train_step" if framework == "torch" else "train_step_graph"
    original = getattr(cls, own)
    calls: list[int] = []

    def counted(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(cls, own, counted)
    return calls


@pytest.mark.integration  # 10-30 s: the integration tier, which CI runs too (make test stays under 15 min)
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_new_algorithm_from_its_own_places_trains_exports_and_serves(
    framework: str, toy_row: algos.Algo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _train_steps_taken(toy_row, framework, monkeypatch)
    run, art = tmp_path / "run", tmp_path / "art"
    argv = ["train", "--algo", "esarsa", "--framework", framework, "--env", "CartPole-v1", "--out", str(run)]
    assert main([*argv, "--no-progress"]) == 0
    ckpt = json.loads((run / "checkpoint.json").read_text())
    assert ckpt["algo"] == "esarsa" and ckpt["network"]["type"] == "esarsa_mlp"
    assert ckpt["hyperparameters"]["learning_starts"] == 500  # the row's own preset
    assert ckpt["hyperparameters"]["net_arch"] == [32, 32]
    assert calls, "the toy agent's own gradient step never ran"  # traced once under TF: at least one call

    argv = ["export", str(run), "--quantize", "fp32", "--out", str(art), "--calib-episodes", "2"]
    assert main([*argv, "--eval-episodes", "2", "--no-progress"]) == 0
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["source"]["algo"] == "esarsa"
    assert manifest["folded"]["action_transform"]["kind"] == "argmax"
    # export verified the file against the source (it refuses otherwise); the policy serves the same actions
    if framework == "tf":
        return  # the served closed loop below is the artifact's, whichever backend trained it

    url = f"opc.tcp://127.0.0.1:{free_port()}"
    record, summary = tmp_path / "plc.json", tmp_path / "serve.json"
    sim_args = ["plc-sim", "--env", "CartPole-v1", "--endpoint", url, "--mode", "lockstep", "--seed", "4"]
    with running([*sim_args, "--episodes", "2", "--record", str(record)], tmp_path / "sim.log") as sim:
        wait_for_server(url)
        serve = start(
            ["serve", str(art), "--endpoint", url, "--period-ms", "5", *NO_MISS, "--summary", str(summary)],
            tmp_path / "serve.log",
        )
        try:
            assert sim.wait(timeout=120) == 0, (tmp_path / "sim.log").read_text()
        finally:
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
    served = json.loads(summary.read_text())
    assert served["deadline_misses"] == 0 and served["invalid"] == 0, served
    direct = evaluate(Policy.load(art).predict, "CartPole-v1", episodes=2, seed=4).returns
    assert json.loads(record.read_text())["returns"] == direct
