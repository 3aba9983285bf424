"""SAC, TD3/DDPG and DQN from `rl2edge train` to an artifact, in both backends: each algorithm's head,
folded exploration noise (gaussian, OU with its state fed back, the policy's own sampling) checked at
export and served by the runtime from a seeded generator, and the errors for noise a policy cannot carry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from testkit.cli import assert_clean_failure, rl2edge

pytest.importorskip("tensorflow")

TINY = {"learning_starts": 100, "batch_size": 32, "net_arch": [32, 32], "eval_freq": 0, "eval_episodes": 2,
        "buffer_size": 1000}  # fmt: skip


def tiny_offpolicy(
    algo: str, framework: str, env_id: str, out: Path, steps: int = 300, seed: int = 0
) -> Path:
    from rl2edge.train.algos import build_config, train

    overrides = {"n_timesteps": steps, **TINY}
    if algo == "dqn":
        overrides.update(train_freq=4, target_update_interval=50)
    out.mkdir(parents=True, exist_ok=True)
    cfg = build_config(env_id, overrides=overrides, algo=algo)
    train(framework, env_id, cfg, seed, out, device="cpu", progress=False)
    return out


def _export(run: Path, out: Path, quantize: str = "fp32", noise: str | None = None):
    from rl2edge.export.pipeline import ExportOptions, export_path

    opts = ExportOptions(
        quantize=quantize, calib_episodes=2, eval_episodes=1, progress=False, noise=noise, noise_seed=7
    )
    return export_path(run, out, opts)


@pytest.fixture(scope="session")
def td3_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_offpolicy("td3", "torch", "Pendulum-v1", tmp_path_factory.mktemp("td3") / "run")


@pytest.fixture(scope="session")
def sac_tf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_offpolicy("sac", "tf", "Pendulum-v1", tmp_path_factory.mktemp("sac") / "run")


@pytest.mark.parametrize(
    "algo,framework,env_id,network",
    [
        ("sac", "torch", "Pendulum-v1", "sac_mlp"),
        ("ddpg", "tf", "Pendulum-v1", "td3_mlp"),
        ("dqn", "torch", "CartPole-v1", "dqn_mlp"),
        ("dqn", "tf", "CartPole-v1", "dqn_mlp"),
    ],
)
def test_each_algorithm_exports_int8_with_its_head(
    algo: str, framework: str, env_id: str, network: str, tmp_path: Path
) -> None:
    run = tiny_offpolicy(algo, framework, env_id, tmp_path / "run")
    meta = json.loads((run / "checkpoint.json").read_text())
    assert (meta["algo"], meta["framework"], meta["network"]["type"]) == (algo, framework, network)
    noise = "ou:theta=0.15,sigma=0.2" if algo == "ddpg" else None  # TF's route for a policy without a std
    report = _export(run, tmp_path / "art", "int8", noise=noise)
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    head = {"sac": "tanh_unscale", "ddpg": "unscale", "dqn": "argmax"}[algo]
    assert manifest["folded"]["action_transform"]["kind"] == head
    if noise is None:
        assert manifest["folded"]["noise"] is None
    else:
        assert manifest["folded"]["noise"]["kind"] == "ou" and manifest["verification"]["noise"]["passed"]
    parity = manifest["verification"]["tflite_vs_source"]
    if algo == "dqn":
        # A 300-step Q-net: half its observations are within a few int8 steps of a tie, where each CPU's
        # int8 kernels (VNNI or not) may pick either action. Judge the decisive half, by the source's
        # top-two margin: 0.97 and 0.99 measured (AMD EPYC, AVX-512); a file that lost its head would be at chance, 0.5.
        from rl2edge.export.sources.checkpoint import source_from_checkpoint
        from rl2edge.runtime.policy import Policy
        from testkit.observations import random_observations

        obs = random_observations(env_id, 1000, seed=5)
        source = source_from_checkpoint(run)
        margins, expected = source.margins(obs), source.deployable_actions(obs)
        policy = Policy.load(tmp_path / "art")
        served = np.array([policy.predict(o) for o in obs])
        decisive = margins >= np.median(margins)
        assert np.mean(served[decisive] == expected[decisive]) >= 0.85
        assert set(np.unique(served)) <= {0, 1}
    else:
        assert parity["max_abs_error"] < 0.2 * max(manifest["action"]["high"])
    assert report.rows[0].closed_loop["mean_return"] == pytest.approx(
        manifest["verification"]["closed_loop"]["this_file"]["mean_return"]
    )


def test_same_seed_same_checkpoint(tmp_path: Path) -> None:
    a = tiny_offpolicy("sac", "torch", "Pendulum-v1", tmp_path / "a", steps=200)
    b = tiny_offpolicy("sac", "torch", "Pendulum-v1", tmp_path / "b", steps=200)
    c = tiny_offpolicy("sac", "torch", "Pendulum-v1", tmp_path / "c", steps=200, seed=1)
    assert (a / "policy.safetensors").read_bytes() == (b / "policy.safetensors").read_bytes()
    assert (a / "policy.safetensors").read_bytes() != (c / "policy.safetensors").read_bytes()


def test_gaussian_noise_folded_verified_and_served_from_a_seeded_generator(
    td3_torch: Path, tmp_path: Path
) -> None:
    from rl2edge.export.sources.checkpoint import source_from_checkpoint
    from rl2edge.runtime.policy import Policy
    from testkit.observations import random_observations

    art = tmp_path / "art"
    _export(td3_torch, art, "fp32", noise="gaussian:sigma=0.2")
    noise = json.loads((art / "manifest.json").read_text())["folded"]["noise"]
    check = json.loads((art / "manifest.json").read_text())["verification"]["noise"]
    assert noise["kind"] == "gaussian" and noise["sigma"] == 0.2 and noise["seed"] == 7
    off = noise["off_equals_deterministic"]  # two graphs: within float32 rounding, not bit for bit
    assert off["max_abs_diff"] <= off["tolerance"] <= 1e-4
    assert check["passed"] and check["expected_std"][0] == pytest.approx(0.2, rel=0.05)
    assert abs(check["sample_std"][0] - check["expected_std"][0]) < 0.02

    obs = random_observations("Pendulum-v1", 50, seed=3)
    source = source_from_checkpoint(td3_torch)
    det = Policy.load(art, explore=False)
    for o, ref in zip(obs, source.deployable_actions(obs), strict=True):
        np.testing.assert_allclose(det.predict(o), ref, atol=1e-4)  # zero noise: the deterministic head
    seq = lambda p: np.array([p.predict(obs[0]) for _ in range(20)])  # noqa: E731
    a, b = Policy.load(art), Policy.load(art)
    first = seq(a)
    np.testing.assert_array_equal(first, seq(b))  # the manifest's seed: reproducible
    assert np.ptp(first) > 0.05  # and it does explore
    a.reset_noise()
    np.testing.assert_array_equal(seq(a), first)
    assert not np.array_equal(seq(Policy.load(art, noise_seed=8)), first)
    onnx = Policy.load(art, backend="onnxruntime")
    np.testing.assert_allclose(seq(onnx), first, atol=1e-4)  # the same draws through the ONNX file


def test_ou_state_is_an_input_and_output_the_runtime_feeds_back(sac_tf: Path, tmp_path: Path) -> None:
    from rl2edge.runtime.policy import Policy
    from rl2edge.specs import ou_step

    art = tmp_path / "art"
    _export(sac_tf, art, "int8", noise="ou:theta=0.15,sigma=0.5,dt=0.01")
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["folded"]["noise"]["graph"]["state"] == "ou_state"  # on the state contract:
    assert [t["name"] for t in manifest["state"]["tensors"]] == ["ou_state"]
    assert manifest["state"]["episode_start"]["input"] == "episode_start"
    assert manifest["verification"]["noise"]["passed"]
    policy = Policy.load(art)
    obs = np.array([1.0, 0.0, 0.0], np.float32)
    rng = np.random.default_rng(7)  # the runtime's draws, replayed
    x = np.zeros((1, 1), np.float32)
    for _ in range(5):
        policy.warm_up(obs)  # the serve loop's warm-up in the spin: no draw, OU's state untouched
        policy.predict(obs)
        x = ou_step(x, rng.standard_normal((1, 1), dtype=np.float32), 0.15, 0.5, 0.01)
        np.testing.assert_allclose(policy.noise_state, x, atol=1e-6)  # fed back call after call
        policy.warm_up(obs)
        np.testing.assert_allclose(policy.noise_state, x, atol=1e-6)
    policy.explore = False
    off = [policy.predict(obs) for _ in range(3)]
    assert all(np.array_equal(o, off[0]) for o in off)
    np.testing.assert_allclose(policy.noise_state, x, atol=1e-6)  # kept while exploration is off
    policy.explore = True
    policy.reset()  # a new episode: OU's state starts from zero (the graph zeroes it: episode_start 1)
    assert policy.noise_state is not None and not policy.noise_state.any()
    policy.predict(obs)
    fresh = ou_step(
        np.zeros((1, 1), np.float32), rng.standard_normal((1, 1), dtype=np.float32), 0.15, 0.5, 0.01
    )
    np.testing.assert_allclose(policy.noise_state, fresh, atol=1e-6)


def test_policy_noise_samples_sacs_own_distribution(sac_tf: Path, tmp_path: Path) -> None:
    art = tmp_path / "art"
    _export(sac_tf, art, "fp32", noise="policy")
    manifest = json.loads((art / "manifest.json").read_text())
    check = manifest["verification"]["noise"]
    assert manifest["folded"]["noise"]["kind"] == "policy" and check["passed"]
    assert check["expected_std"][0] > 0.05  # an untrained SAC is wide


@pytest.mark.parametrize(
    "noise,fragment",
    [
        ("policy", "samples the policy's own distribution, which this source (td3) does not"),
        ("gaussian:sigma=-1", "sigma must be a finite number >= 0"),
        ("ou:sigma=0.2,beta=1", "ou takes theta, sigma, dt"),
        ("pink", "unknown kind 'pink'"),
    ],
)
def test_noise_a_policy_cannot_carry_is_refused(
    td3_torch: Path, tmp_path: Path, noise: str, fragment: str
) -> None:
    proc = rl2edge("export", td3_torch, "--noise", noise, "--out", tmp_path / "art")
    assert_clean_failure(proc, fragment)
    assert not (tmp_path / "art").exists()


def test_train_refuses_an_algorithm_that_does_not_fit_the_action_space(tmp_path: Path) -> None:
    proc = rl2edge(
        "train", "--algo", "dqn", "--env", "Pendulum-v1", "--steps", "100", "--out", tmp_path / "r"
    )
    assert_clean_failure(proc, "DQN needs a Discrete action space")
    proc = rl2edge(
        "train", "--algo", "sac", "--env", "CartPole-v1", "--steps", "100", "--out", tmp_path / "r2"
    )
    assert_clean_failure(proc, "SAC needs a Box action space")


@pytest.mark.integration  # 10-30 s: the integration tier, which CI runs too (make test stays under 15 min)
def test_serve_feeds_folded_noise_over_opcua_and_no_explore_is_deterministic(
    td3_torch: Path, tmp_path: Path
) -> None:
    from rl2edge.runtime.policy import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server

    art = tmp_path / "art"
    _export(td3_torch, art, "fp32", noise="ou:theta=0.15,sigma=0.3")

    def served_return(*flags: str) -> float:
        url = f"opc.tcp://127.0.0.1:{free_port()}"
        record = tmp_path / f"returns{len(flags)}.json"
        sim_args = ["plc-sim", "--env", "Pendulum-v1", "--endpoint", url, "--seed", "3", "--episodes", "1",
                    "--record", str(record)]  # fmt: skip
        with running(sim_args, tmp_path / "sim.log") as sim:
            wait_for_server(url)
            summary = tmp_path / "serve.json"
            serve_args = [
                "serve",
                str(art),
                "--endpoint",
                url,
                "--period-ms",
                "5",
                *NO_MISS,
                "--summary",
                str(summary),
            ]
            with running([*serve_args, *flags], tmp_path / "serve.log") as serve:
                assert sim.wait(timeout=120) == 0, (tmp_path / "sim.log").read_text()
                assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
        assert json.loads(summary.read_text())["deadline_misses"] == 0
        return json.loads(record.read_text())["returns"][0]

    deterministic = evaluate(Policy.load(art, explore=False).predict, "Pendulum-v1", 1, 3).returns[0]
    assert served_return("--no-explore") == deterministic
    assert served_return() != deterministic  # the noise reaches the plant
