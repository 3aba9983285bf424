"""Plants nobody here wrote: every form of `--env` Gymnasium documents, and every observation space form,
either works through the real `main()` or is refused before any work in one line that says what to do.

testkit.registered_envs stands in for a third-party package (highway-env): it registers its ids when
imported, and its matrix plants observe a (5, 5) Box, the shape of highway-env's Kinematics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.errors import ConfigError
from rl2edge.train.core.envs import check_env_id, make_env, make_vec_env, vec_observation_spec
from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server

ROOT = Path(__file__).resolve().parents[1]
MODULE = "testkit.registered_envs"
REGISTERED = f"{MODULE}:RegCartPole-v0"  # Gymnasium's `module:Env-v0`: the id exists once MODULE is imported
MATRIX_CARTPOLE = f"{MODULE}:MatrixCartPole-v0"
MATRIX_PENDULUM = f"{MODULE}:MatrixPendulum-v0"


# ------------------------------------------------------------------------------ `--env module:Env-v0`
def test_the_module_id_form_is_resolved_as_gymnasium_make_resolves_it() -> None:
    check_env_id(REGISTERED)
    env = make_env(REGISTERED)
    assert env.spec is not None and env.spec.id == "RegCartPole-v0" and env.spec.max_episode_steps == 200
    with pytest.raises(
        ConfigError, match=r"unknown environment id 'testkit.registered_envs:Nope-v0'.*module:Env-v0"
    ):
        check_env_id(f"{MODULE}:Nope-v0")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_plant'"):
        check_env_id("no_such_plant:Plant-v0")


def test_train_takes_the_module_id_form_through_main(tmp_path: Path) -> None:
    """The documented form that failed for every module (`unknown environment id`, exit 2)."""
    out = tmp_path / "run"
    assert main(["train", "--env", REGISTERED, "--steps", "256", "--out", str(out), "--no-progress"]) == 0
    ckpt = json.loads((out / "checkpoint.json").read_text())
    assert ckpt["env_id"] == REGISTERED  # recorded as given: export and evaluate import the module again


# ------------------------------------------------------------------------------ observation space forms
def test_a_matrix_observation_is_flattened_for_the_network_and_keeps_its_shape() -> None:
    envs = make_vec_env(MATRIX_CARTPOLE, 2)
    spec = vec_observation_spec(envs)
    assert spec.shape == (5, 5) and spec.is_matrix and len(spec.low) == 25
    obs, _ = envs.reset(seed=0)
    raw, _ = make_env(MATRIX_CARTPOLE).reset(seed=0)
    assert obs.shape == (2, 25) and np.array_equal(obs[0], raw.reshape(-1))  # row-major, as numpy.ravel
    assert spec.flatten(raw).shape == (5, 5)  # the graph takes it in its shape; the PLC's flat array too


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ("TupleSensors", ["observation space Tuple(", "gymnasium.wrappers.FlattenObservation"]),
        ("TextLog", ["observation space Text(", "fixed-size Box"]),
        ("DictWithDiscreteKey", ["Dict observation key 'mode' is Discrete(3)", "FlattenObservation"]),
        ("TinyCamera", ["observation image 'image' is 16x16", "needs at least 36x36 pixels"]),
    ],
)
def test_a_space_rl2edge_does_not_take_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str, fragments: list[str]
) -> None:
    out = tmp_path / "run"
    rc = main(["train", "--env", f"{MODULE}:{env}", "--steps", "256", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err)
    for f in fragments:
        assert f in err[-1], err[-1]
    assert not out.exists() and not list(tmp_path.glob(".run*"))  # nothing written, not even a partial run


def test_a_frame_stack_of_a_matrix_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stacking is built for flat Box observations: the exported stack takes one flat frame a call."""
    (tmp_path / "hp.yml").write_text("frame_stack: 2\n")
    out = tmp_path / "run"
    args = ["train", "--env", MATRIX_CARTPOLE, "--steps", "256", "--config", str(tmp_path / "hp.yml")]
    assert main([*args, "--out", str(out), "--no-progress"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "frame_stack 2: stacking is implemented for flat Box observations; this one is [5, 5]" in last, (
        last
    )
    assert not out.exists() and not list(tmp_path.glob(".run*"))


@pytest.mark.integration  # about 60 s: the integration tier, which CI runs too
@pytest.mark.parametrize(
    ("algo", "framework", "env"),
    [
        ("ppo", "torch", MATRIX_CARTPOLE),
        ("a2c", "tf", MATRIX_CARTPOLE),
        ("dqn", "torch", MATRIX_CARTPOLE),
        ("ppo_lstm", "tf", MATRIX_CARTPOLE),
        ("sac", "tf", MATRIX_PENDULUM),
        ("td3", "torch", MATRIX_PENDULUM),
    ],
)
def test_every_algorithm_trains_and_exports_on_a_5x5_box(
    tmp_path: Path, algo: str, framework: str, env: str
) -> None:
    """PPO crashed with a 25-line traceback here (the network built for 25 inputs, the rollout fed the
    matrix); DQN, SAC and TD3 refused it. Now each trains, and its fp32 artifact takes the matrix in its
    shape ([1, 5, 5]) and flat (a PLC array of 25), with the same action."""
    from rl2edge.runtime import Policy

    run, art = tmp_path / "run", tmp_path / "art"
    steps = "600" if algo in ("sac", "td3") else "512"
    args = ["train", "--algo", algo, "--framework", framework, "--env", env, "--steps", steps]
    assert main([*args, "--out", str(run), "--no-progress"]) == 0
    assert json.loads((run / "checkpoint.json").read_text())["observation_space"]["shape"] == [5, 5]
    args = [
        "export",
        str(run),
        "--quantize",
        "fp32",
        "--out",
        str(art),
        "--eval-episodes",
        "2",
        "--no-progress",
    ]
    assert main(args) == 0
    assert json.loads((art / "manifest.json").read_text())["observation"]["shape"] == [5, 5]
    policy = Policy.load(art)
    raw, _ = make_env(env).reset(seed=3)
    assert policy.backend.input_shape[-2:] == (5, 5)
    assert np.array_equal(np.asarray(policy.predict(raw)), np.asarray(policy.predict(raw.reshape(-1))))


@pytest.mark.integration  # about 40 s
def test_a_registered_matrix_plant_goes_from_train_to_plc_sim_with_the_returns_of_evaluate(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """`--env module:Env-v0` through train, export (int8), evaluate and plc-sim, each by its `main()` or
    its command: the (5, 5) observation crosses OPC UA as one Double[25] array node, row-major, and the
    closed loop's returns equal evaluate's on the same seeds."""
    run, art = tmp_path / "run", tmp_path / "art"
    train = ["train", "--env", MATRIX_CARTPOLE, "--steps", "4096", "--out", str(run), "--no-progress"]
    assert main(train) == 0
    assert main(["export", str(run), "--quantize", "int8", "--out", str(art), "--no-progress"]) == 0
    capfd.readouterr()
    assert main(["evaluate", str(art), "--episodes", "2", "--seed", "5", "--json"]) == 0
    evaluated = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert evaluated["env_id"] == MATRIX_CARTPOLE

    url, record, summary = (
        f"opc.tcp://127.0.0.1:{free_port()}",
        tmp_path / "sim.json",
        tmp_path / "serve.json",
    )
    sim = ["plc-sim", "--env", MATRIX_CARTPOLE, "--endpoint", url, "--seed", "5", "--episodes", "2",
           "--record", str(record), "--strict"]  # fmt: skip
    serve = ["serve", str(art), "--endpoint", url, "--period-ms", "5", *NO_MISS, "--summary", str(summary)]
    with running(
        sim, tmp_path / "sim.log", {"PYTHONPATH": str(ROOT)}
    ) as sim_proc:  # testkit, as a user's module
        wait_for_server(url)
        with running(serve, tmp_path / "serve.log") as serve_proc:
            assert sim_proc.wait(timeout=180) == 0, (tmp_path / "sim.log").read_text()
            assert stop(serve_proc) == 0, (tmp_path / "serve.log").read_text()
    assert json.loads(record.read_text())["returns"] == evaluated["returns"]
    s = json.loads(summary.read_text())
    assert s["invalid"] == 0 and s["write_rejected"] == 0 and s["deadline_misses"] == 0, s
    assert "observation Double[25]," in (tmp_path / "serve.log").read_text()


# ------------------------------------------------------------------------------ a peer's own file
@pytest.mark.integration  # about 30 s
@pytest.mark.parametrize(("algo", "env"), [("PPO", MATRIX_CARTPOLE), ("SAC", MATRIX_PENDULUM)])
def test_an_sb3_model_of_a_matrix_plant_exports_and_acts_as_sb3_predicts(
    tmp_path: Path, algo: str, env: str
) -> None:
    """SB3's MlpPolicy flattens a (5, 5) Box (FlattenExtractor); its zip was refused ("multi-dimensional
    observations are not supported yet"). The fp32 artifact, fed each observation in its shape, gives SB3's
    own deterministic predict: the same index for PPO's Discrete action on every one of 200 observations
    (none of them near a tie: the test skips those whose two logits are within 1e-3), and torques within
    1e-4 for SAC (float32 through two engines)."""
    import gymnasium as gym
    import stable_baselines3 as sb3
    import torch

    import testkit.registered_envs  # noqa: F401  (registers the ids for gym.make)
    from rl2edge.export.pipeline import ExportOptions, export_source
    from rl2edge.export.sources.sb3 import source_from_sb3
    from rl2edge.runtime import Policy

    kw = {"n_steps": 256, "batch_size": 64} if algo == "PPO" else {"learning_starts": 50}
    model = getattr(sb3, algo)("MlpPolicy", gym.make(env.split(":")[1]), seed=0, device="cpu", **kw)
    model.learn(512 if algo == "PPO" else 150)
    model.save(tmp_path / "model.zip")
    opts = ExportOptions(quantize="fp32", calib_episodes=2, eval_episodes=2, progress=False)
    export_source(source_from_sb3(tmp_path / "model.zip", env, None), tmp_path / "art", opts)
    policy = Policy.load(tmp_path / "art")
    assert json.loads((tmp_path / "art" / "manifest.json").read_text())["observation"]["shape"] == [5, 5]

    sim, obs = make_env(env), []
    o, _ = sim.reset(seed=0)
    for _ in range(200):
        obs.append(o)
        o, _, term, trunc, _ = sim.step(sim.action_space.sample())
        if term or trunc:
            o, _ = sim.reset()
    batch = np.stack(obs)
    expected = model.predict(batch, deterministic=True)[0]
    got = np.stack([np.asarray(policy.predict(x)).reshape(-1) for x in batch])
    if algo == "PPO":
        with torch.no_grad():
            logits = model.policy.get_distribution(model.policy.obs_to_tensor(batch)[0]).distribution.logits
        clear = (logits.max(-1).values - logits.min(-1).values).numpy() > 1e-3
        assert clear.sum() > 150 and np.array_equal(got[clear, 0], expected[clear])
    else:
        assert np.abs(got - expected).max() < 1e-4


# ------------------------------------------------------------------------------ a plant nobody here wrote
@pytest.mark.integration  # about 35 s: highway-env steps at ~25 per second on this machine
def test_highway_env_trains_exports_and_evaluates_by_its_own_registered_id(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The issue's report, as its user ran it: `--env highway_env:highway-fast-v0` (the id highway-env
    registers on import; `unknown environment id`, exit 2, before) with its default Kinematics observation,
    a (5, 5) matrix (PPO crashed on it with a 25-line traceback). A few updates, then an int8 file that
    `evaluate` runs in the env: the point is the path, not the driving."""
    pytest.importorskip("highway_env")
    env = "highway_env:highway-fast-v0"
    run, art = tmp_path / "run", tmp_path / "art"
    (tmp_path / "hp.yml").write_text(
        "n_steps: 64\nn_envs: 2\nbatch_size: 64\nn_epochs: 1\neval_episodes: 1\n"
    )
    args = ["train", "--env", env, "--steps", "128", "--config", str(tmp_path / "hp.yml"), "--out", str(run)]
    assert main([*args, "--no-progress"]) == 0
    args = ["export", str(run), "--quantize", "int8", "--calib-episodes", "1", "--eval-episodes", "1"]
    assert main([*args, "--out", str(art), "--no-progress"]) == 0
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["source"]["env_id"] == env and manifest["observation"]["shape"] == [5, 5]
    capfd.readouterr()
    assert main(["evaluate", str(art), "--episodes", "1", "--json"]) == 0
    out = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert out["env_id"] == env and len(out["returns"]) == 1 and np.isfinite(out["returns"][0])


@pytest.mark.integration  # about 25 s
def test_a_recurrent_policy_on_a_uint8_vector_exports_its_float_files_behind_a_uint8_input(
    tmp_path: Path,
) -> None:
    """MiniGrid's symbolic view, flattened (147 uint8 values), with ppo_lstm: the float files' uint8 input
    wrapper took only graphs of one input and refused the LSTM's (obs, episode_start and the state), found
    by benchmarks/env_matrix.py. Now the observation input is uint8 and the others stay float32."""
    pytest.importorskip("minigrid")
    from ai_edge_litert.interpreter import Interpreter

    from rl2edge.runtime import Policy
    from testkit.runs import export_run, tiny_train

    env = "testkit.matrix_plants:MemoryFlat-v0"
    run = tiny_train(env, tmp_path / "run", steps=256, algo="ppo_lstm", n_envs=2, n_steps=64, batch_size=64)
    export_run(run, tmp_path / "art", "fp32")  # export's own parity checks pass on the wrapped file
    inputs = {
        d["name"]: d["dtype"]
        for d in Interpreter(str(tmp_path / "art" / "policy.tflite")).get_input_details()
    }
    (obs_input,) = [n for n in inputs if "obs" in n]
    assert inputs.pop(obs_input) == np.uint8 and len(inputs) == 3, inputs  # episode_start, LSTM h and c
    assert all(t == np.float32 for t in inputs.values()), inputs
    obs, _ = make_env(env).reset(seed=0)
    assert obs.dtype == np.uint8 and np.asarray(Policy.load(tmp_path / "art").predict(obs)).size == 1
