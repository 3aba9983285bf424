"""Action-rate limits folded into the graph (`export --max-action-rate R --period-ms P`): the artifact keeps
the previous action as a state tensor, limits each component's change to R * P, leaves an episode's first
action alone, and evaluate and serve run it alike.

Tolerances: the limited and the unlimited fp32 files run the same weights with the same kernels, but the
converter may fuse the graphs differently: their actions are compared to 1e-5 (actions of order 1). The
limit itself is float32 arithmetic in every mode (int8 keeps SUB/ADD/MINIMUM/MAXIMUM float): a step may
exceed max_step by float rounding of `prev + delta - prev` only, 1e-6 here.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.export.pipeline import ExportOptions, export_path
from rl2edge.runtime.manifest import load_manifest
from rl2edge.runtime.policy import Policy
from testkit.cli import assert_clean_failure, rl2edge
from testkit.runs import export_run, tiny_train

pytestmark = pytest.mark.integration  # training runs and TFLite conversions: the integration tier

ENV = "Pendulum-v1"
RATE, PERIOD_MS = 0.4, 50.0  # Pendulum's torque in [-2, 2]: at most 0.02 per 50 ms step
MAX_STEP = np.float32(0.019989013671875)  # 0.02 rounded down to a float16 value: the fp16 file's constant


def _limited(run: Path, out: Path, quantize: str = "int8") -> Path:
    opts = ExportOptions(
        quantize=quantize,
        calib_episodes=3,
        eval_episodes=2,
        progress=False,
        max_action_rate=str(RATE),
        period_ms=PERIOD_MS,
    )
    export_path(run, out, opts)
    return out


# The limit is export's graph, the same for both backends' checkpoints: torch's in the integration tier,
# tf's in the slow one (`make test-all`); the recurrent test below takes tf in the tier.
@pytest.fixture(scope="module", params=["torch", pytest.param("tf", marks=pytest.mark.slow)])
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(limited artifacts: <mode>/ for every mode, the unlimited fp32 artifact) of a briefly trained PPO."""
    root = tmp_path_factory.mktemp(f"rate-{request.param}")
    run = tiny_train(ENV, root / "run", steps=2048, framework=request.param, n_envs=2, n_steps=512,
                     batch_size=256)  # fmt: skip
    export_run(run, root / "free", "fp32")
    return _limited(run, root / "limited", "all"), root / "free"


def _episode(policy: Policy, seed: int, steps: int, free: Policy | None = None):
    """(actions, the unlimited policy's action on each same observation) over one Pendulum episode."""
    env = gym.make(ENV)
    obs, _ = env.reset(seed=seed)
    acts, own = [], []
    for _ in range(steps):
        a = np.array(policy.predict(obs), np.float32)
        if free is not None:
            own.append(np.array(free.predict(obs), np.float32))
        acts.append(a)
        obs, *_ = env.step(a)
    env.close()
    return np.stack(acts), (np.stack(own) if own else None)


def test_the_graph_limits_each_step_and_leaves_the_first_action_alone(exported) -> None:
    """fp32: each action is prev + clip(policy's - prev, +-max_step), the policy's own action on the same
    observation from the unlimited file; the first is the policy's own. fp16, dynamic and int8: no step
    exceeds max_step."""
    limited, free = exported
    fp32, unlimited = Policy.load(limited / "fp32"), Policy.load(free)
    acts, own = _episode(fp32, seed=5, steps=120, free=unlimited)
    assert own is not None
    np.testing.assert_allclose(acts[0], own[0], atol=1e-5)
    expected = acts[:-1] + np.clip(own[1:] - acts[:-1], -MAX_STEP, MAX_STEP)
    np.testing.assert_allclose(acts[1:], expected, atol=1e-5)
    bound = np.abs(own[1:] - acts[:-1]) > MAX_STEP + 1e-5
    assert bound.sum() >= 10, "the limit should bind on some steps, or this test shows nothing"
    np.testing.assert_allclose(fp32.state()["prev_action"][0], acts[-1], atol=0)

    for mode in ("fp16", "dynamic", "int8"):
        policy = Policy.load(limited / mode)
        for seed in (5, 6):
            steps = np.abs(np.diff(_episode(policy, seed, 120)[0], axis=0))
            assert steps.max() <= MAX_STEP + 1e-6, (mode, steps.max())
            policy.reset()
    manifest = load_manifest(limited / "int8").data
    rate = manifest["folded"]["action_rate"]
    assert rate["max_rate"] == [RATE] and rate["period_ms"] == PERIOD_MS
    assert rate["max_step"] == [float(MAX_STEP)]
    assert [t["name"] for t in manifest["state"]["tensors"]] == ["prev_action"]


def test_evaluate_runs_the_limit_as_export_measured_it(exported, capfd) -> None:
    """`rl2edge evaluate` resets the previous action at each episode: its returns are the file's own
    closed-loop returns that export measured, and not the unlimited file's."""
    limited, free = exported
    closed = load_manifest(limited / "int8").data["verification"]["closed_loop"]
    n = closed["episodes"]
    assert main(["evaluate", str(limited / "int8"), "--episodes", str(n), "--seed", "0", "--json"]) == 0
    out = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert out["returns"] == closed["this_file"]["returns"]
    assert main(["evaluate", str(free), "--episodes", str(n), "--seed", "0", "--json"]) == 0
    unlimited = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert unlimited["returns"] != out["returns"]


def test_served_over_opc_ua_every_episode_equals_evaluate(exported, tmp_path: Path) -> None:
    """plc-sim with its episode-start flag: serve resets the previous action with each episode's first
    observation, so each served episode returns what evaluate returns on its seed; serve says the limit."""
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import NO_MISS, episode_start_map, free_port, running, stop, wait_for_server

    artifact = exported[0] / "int8"
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    record = tmp_path / "returns.json"
    sim = ["plc-sim", "--env", ENV, "--endpoint", url, "--mode", "lockstep", "--seed", "3", "--episodes", "2",
           "--record", str(record), "--strict"]  # fmt: skip
    with running(sim, tmp_path / "sim.log") as plc:
        wait_for_server(url)
        serve = ["serve", str(artifact), "--endpoint", url, "--map", str(episode_start_map(tmp_path)),
                 "--period-ms", "5", *NO_MISS]  # fmt: skip
        with running(serve, tmp_path / "serve.log") as proc:
            assert plc.wait(timeout=180) == 0, (tmp_path / "sim.log").read_text()
            assert stop(proc) == 0, (tmp_path / "serve.log").read_text()
    served = json.loads(record.read_text())["returns"]
    assert served == evaluate(Policy.load(artifact).predict, ENV, 2, 3).returns
    log = (tmp_path / "serve.log").read_text()
    assert "action-rate limit" in log and "stated at a period of 50 ms, serve's --period-ms is 5" in log


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--max-action-rate", "0.5"], "--max-action-rate needs --period-ms"),
        (["--period-ms", "50"], "--period-ms states the period of --max-action-rate"),
        (["--max-action-rate", "-1", "--period-ms", "50"], "every rate must be a finite number > 0"),
        (["--max-action-rate", "fast", "--period-ms", "50"], "'fast' is not a number"),
        (["--max-action-rate", "1", "--period-ms", "0"], "--period-ms: '0' is out of range"),
    ],
)
def test_bad_rate_options_fail_before_anything_is_loaded(
    args: list[str], fragment: str, tmp_path: Path, capsys
) -> None:
    assert main(["export", str(tmp_path / "no-run"), "--out", str(tmp_path / "out"), *args]) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_discrete_policy_or_a_wrong_number_of_rates_is_refused(
    pendulum_run: Path, cartpole_run: Path, tmp_path: Path
) -> None:
    proc = rl2edge(
        "export", cartpole_run, "--out", tmp_path / "cp", "--max-action-rate", "1", "--period-ms", "20"
    )
    assert_clean_failure(proc, "this policy's action is Discrete")
    proc = rl2edge(
        "export", pendulum_run, "--out", tmp_path / "pd", "--max-action-rate", "1,2", "--period-ms", "50"
    )
    assert_clean_failure(proc, "gives 2 rates for an action of 1 components")
    assert not (tmp_path / "cp").exists() and not (tmp_path / "pd").exists()


@pytest.mark.parametrize("framework", [pytest.param("torch", marks=pytest.mark.slow), "tf"])
def test_a_recurrent_policy_carries_its_lstm_state_and_the_previous_action(
    framework: str, tmp_path: Path
) -> None:
    """ppo_lstm with a rate limit: the limit's state comes after the LSTM's, export verified the file over
    whole episodes with both carried, and the int8 file moves no more than max_step per step."""
    run = tiny_train("PendulumNoVel-v1", tmp_path / "run", steps=1024, algo="ppo_lstm", framework=framework,
                     n_envs=2, n_steps=256, batch_size=128, n_epochs=2)  # fmt: skip
    art = _limited(run, tmp_path / "art")
    manifest = load_manifest(art).data
    names = [t["name"] for t in manifest["state"]["tensors"]]
    assert names == ["lstm_h_0", "lstm_c_0", "prev_action"]
    assert "LSTM" in manifest["state"]["cell"] and "action-rate limit" in manifest["state"]["cell"]
    policy = Policy.load(art)
    env = gym.make("PendulumNoVel-v1")
    obs, _ = env.reset(seed=1)
    acts = []
    for _ in range(100):
        acts.append(np.array(policy.predict(obs), np.float32))
        obs, *_ = env.step(acts[-1])
    assert np.abs(np.diff(np.stack(acts), axis=0)).max() <= MAX_STEP + 1e-6
    state = policy.state()
    assert set(state) == set(names) and np.array_equal(state["prev_action"][0], acts[-1])


def test_the_agv_with_memory_and_the_drives_limits_runs_as_written(tmp_path: Path) -> None:
    """examples/agv/README.md's ppo_lstm block, after the walk-through's set-up, on a small budget: the
    artifact takes the four keys, carries h, c and the previous command, and moves no faster than the
    drive's limits."""
    from testkit.doc_blocks import ROOT, run_walk_through

    setup = "export PYTHONPATH=$PWD; mkdir -p ~/agv && cd ~/agv\nrl2edge train --algo ppo_lstm"
    replace = {
        "rl2edge train --algo ppo_lstm": setup,
        "--seed 0 --out runs/agv-lstm": "--seed 0 --out runs/agv-lstm --steps 2048 --no-progress",
        "--quantize int8": "--quantize int8 --calib-episodes 2 --eval-episodes 2 --no-progress",
    }
    run_walk_through(ROOT / "examples/agv/README.md", "tests/test_action_rate.py", tmp_path, replace, 1)
    art = tmp_path / "agv" / "artifacts" / "agv-lstm"
    manifest = load_manifest(art).data
    assert [k["name"] for k in manifest["observation"]["keys"]] == ["lidar", "imu", "goal", "speed"]
    assert [t["name"] for t in manifest["state"]["tensors"]] == ["lstm_h_0", "lstm_c_0", "prev_action"]
    np.testing.assert_allclose(
        manifest["folded"]["action_rate"]["max_step"], [0.05, 0.1], rtol=1e-3
    )  # float16
    from examples.agv import AgvDictEnv

    policy, env = Policy.load(art), AgvDictEnv()
    obs, _ = env.reset(seed=0)
    acts = []
    for _ in range(100):
        acts.append(np.array(policy.predict(obs), np.float32))
        obs, _, terminated, truncated, _ = env.step(acts[-1])
        if terminated or truncated:
            break
    steps = np.abs(np.diff(np.stack(acts), axis=0))
    assert (steps <= np.array([0.05, 0.1], np.float32) + 1e-6).all(), steps.max(axis=0)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda r: r.update(max_step=[0.0]), "folded.action_rate.max_step"),
        (lambda r: r.update(period_ms=-1), "folded.action_rate.period_ms"),
        (lambda r: r.update(state="nowhere"), "folded.action_rate.state: must name a tensor"),
    ],
)
def test_a_malformed_action_rate_section_is_refused(exported, edit, fragment: str, tmp_path: Path) -> None:
    import shutil

    from rl2edge.errors import ManifestError
    from rl2edge.runtime.manifest import write_manifest

    art = tmp_path / "art"
    shutil.copytree(exported[0] / "fp32", art)
    manifest = load_manifest(art)
    edit(manifest.data["folded"]["action_rate"])
    write_manifest(art, manifest.data)
    with pytest.raises(ManifestError, match=fragment):
        Policy.load(art)
