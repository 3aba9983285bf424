"""Stable-Baselines3 models with VecNormalize -> verified artifacts, checked against SB3's own predict()."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.export.pipeline import ExportOptions, export_source
from rl2edge.export.sources.sb3 import source_from_sb3
from rl2edge.runtime import Policy, load_manifest
from testkit.observations import random_observations
from testkit.tflite_ops import assert_float_until_first_conv

pytest.importorskip("stable_baselines3")


def _train_sb3(
    algo: str, env_id: str, steps: int, out: Path, vecnormalize: bool, **kw
) -> tuple[Path, Path | None]:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    venv = make_vec_env(env_id, n_envs=1, seed=0)
    if vecnormalize:
        venv = VecNormalize(venv, norm_obs=True, norm_reward=True, clip_obs=5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(sb3, algo)("MlpPolicy", venv, seed=0, device="cpu", **kw)
        out.mkdir(parents=True, exist_ok=True)
        # SB3's default logger makes a folder in the system's temp dir on every learn(); keep it here
        model.set_logger(configure(str(out / "sb3_log"), []))
        model.learn(steps)
    model.save(out / "model.zip")
    vn = None
    if vecnormalize:
        vn = out / "vecnormalize.pkl"
        venv.save(str(vn))
    return out / "model.zip", vn


def _sb3_actions(algo: str, zip_path: Path, vn_path: Path | None, obs: np.ndarray) -> np.ndarray:
    """SB3's own deterministic predict, with VecNormalize applied as SB3 applies it."""
    import pickle

    import stable_baselines3 as sb3

    model = getattr(sb3, algo).load(str(zip_path), device="cpu")
    x = obs
    if vn_path is not None:
        with open(vn_path, "rb") as f:
            x = pickle.load(f).normalize_obs(obs)
    return model.predict(x, deterministic=True)[0]


OPTS = dict(calib_episodes=2, eval_episodes=2, progress=False)


def test_ppo_cartpole_with_vecnormalize_agrees_100_percent_and_auto_picks_a_mode(tmp_path: Path) -> None:
    zip_path, vn = _train_sb3(
        "PPO", "CartPole-v1", 512, tmp_path / "sb3", True, n_steps=128, batch_size=64, n_epochs=2
    )
    report = export_source(
        source_from_sb3(zip_path, "CartPole-v1", vn), tmp_path / "art", ExportOptions(quantize="auto", **OPTS)
    )
    m = load_manifest(tmp_path / "art").data
    v = m["verification"]
    assert v["reference"] == "SB3 predict" and m["source"]["algo"] == "ppo" and m["source"]["vecnormalize"]
    fp32 = next(r for r in report.rows if r.mode == "fp32")
    assert fp32.parity["agreement"] == 1.0 and v["onnx_vs_source"]["agreement"] == 1.0
    assert m["folded"]["normalization"]["clip"] == 5.0 and m["folded"]["action_transform"]["kind"] == "argmax"
    auto = m["quantization"]["auto"]
    assert auto["chosen"] == m["quantization"]["mode"] == report.chosen
    assert {c["mode"] for c in auto["candidates"]} == {"fp32", "fp16", "dynamic", "int8"}
    chosen = next(c for c in auto["candidates"] if c["mode"] == auto["chosen"])
    # the fastest within the tie band (AUTO_LATENCY_TIE_PCT), and the smallest file of that band
    kept = [c for c in auto["candidates"] if c["within_drop"]]
    fastest = min(c["predict_p50_us"] for c in kept)
    band = [c for c in kept if c["predict_p50_us"] <= fastest * (1 + auto["latency_tie_pct"] / 100)]
    assert chosen["within_drop"] and chosen in band, auto
    assert chosen["size_bytes"] == min(c["size_bytes"] for c in band), auto
    # what the command prints: the figures it chose by and its rule, not only the manifest
    shown = report.auto_table()
    assert (
        f"{auto['chosen']} (chosen)" in shown and "p50 us (interleaved)" in shown and "rule: fastest" in shown
    )
    for c in auto["candidates"]:
        assert f"{c['predict_p50_us']:.1f}" in shown
    # independent check on fresh observations, through the runtime, against SB3 itself
    obs = random_observations("CartPole-v1", 200, seed=11)
    fp32_art = tmp_path / "fp32"
    export_source(
        source_from_sb3(zip_path, "CartPole-v1", vn), fp32_art, ExportOptions(quantize="fp32", **OPTS)
    )
    policy = Policy.load(fp32_art)
    assert [policy.predict(o) for o in obs] == _sb3_actions("PPO", zip_path, vn, obs).tolist()


def test_sac_pendulum_with_vecnormalize_within_1e_4(tmp_path: Path) -> None:
    zip_path, vn = _train_sb3(
        "SAC", "Pendulum-v1", 300, tmp_path / "sb3", True, learning_starts=100, batch_size=64
    )
    export_source(
        source_from_sb3(zip_path, "Pendulum-v1", vn), tmp_path / "art", ExportOptions(quantize="fp32", **OPTS)
    )
    m = load_manifest(tmp_path / "art").data
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    assert m["folded"]["action_transform"]["kind"] == "tanh_unscale"
    obs = random_observations("Pendulum-v1", 200, seed=12)
    policy = Policy.load(tmp_path / "art")
    got = np.stack([policy.predict(o) for o in obs])
    expected = _sb3_actions("SAC", zip_path, vn, obs)
    assert np.abs(got - expected).max() <= 1e-4 and np.abs(expected).max() > 1e-3


@pytest.mark.parametrize(
    ("algo", "env_id", "head", "kw"),
    [
        ("DQN", "CartPole-v1", "argmax", {"learning_starts": 100}),
        ("A2C", "Pendulum-v1", "clip", {}),
        ("TD3", "Pendulum-v1", "unscale", {"learning_starts": 100}),
    ],
)
def test_other_algorithms_match_sb3_predict(
    tmp_path: Path, algo: str, env_id: str, head: str, kw: dict
) -> None:
    zip_path, _ = _train_sb3(algo, env_id, 300, tmp_path / "sb3", False, **kw)
    export_source(
        source_from_sb3(zip_path, env_id, None), tmp_path / "art", ExportOptions(quantize="fp32", **OPTS)
    )
    m = load_manifest(tmp_path / "art").data
    assert m["folded"]["action_transform"]["kind"] == head and m["source"]["algo"] == algo.lower()
    parity = m["verification"]["tflite_vs_source"]
    if head == "argmax":
        assert parity["agreement"] == 1.0
    else:
        assert parity["max_abs_error"] <= 1e-4


def test_sb3_input_errors(tmp_path: Path) -> None:
    bogus = tmp_path / "model.zip"
    bogus.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="needs --env"):
        source_from_sb3(bogus, None, None)
    with pytest.raises(ConfigError, match="not a Stable-Baselines3 model"):
        source_from_sb3(bogus, "CartPole-v1", None)
    zip_path, _ = _train_sb3(
        "PPO", "CartPole-v1", 64, tmp_path / "sb3", False, n_steps=64, batch_size=64, n_epochs=1
    )
    with pytest.raises(ConfigError, match="Is --env right"):
        source_from_sb3(zip_path, "Pendulum-v1", None)
    with pytest.raises(ConfigError, match="VecNormalize file"):
        source_from_sb3(zip_path, "CartPole-v1", tmp_path / "missing.pkl")


@pytest.mark.integration  # 10-30 s: the integration tier, which CI runs too (make test stays under 15 min)
def test_cli_exports_an_sb3_zip_and_says_how_to_serve_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    zip_path, vn = _train_sb3(
        "PPO", "CartPole-v1", 128, tmp_path / "sb3", True, n_steps=64, batch_size=64, n_epochs=1
    )
    exe = str(Path(sys.executable).with_name("rl2edge"))
    proc = subprocess.run(
        [
            exe,
            "export",
            str(zip_path),
            "--env",
            "CartPole-v1",
            "--vecnormalize",
            str(vn),
            "--quantize",
            "int8",
            "--out",
            str(tmp_path / "art"),
            "--calib-episodes",
            "2",
            "--eval-episodes",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "SB3 predict" in proc.stdout and "policy.tflite" in proc.stdout
    assert f"rl2edge serve {tmp_path / 'art'}" in proc.stdout
    bad = subprocess.run(
        [exe, "export", str(zip_path), "--out", str(tmp_path / "x")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "needs --env" in bad.stderr and "Traceback" not in bad.stderr


def test_multi_input_ppo_with_vecnormalize_norm_obs_keys_matches_sb3_predict(tmp_path: Path) -> None:
    """SB3's MultiInputPolicy on a Dict env, VecNormalize normalizing one key of two (`norm_obs_keys`):
    the other key reaches the network raw, unclipped, as VecNormalize leaves it. The artifact takes one
    input per key and its actions are within 1e-4 of SB3's predict on observations it never saw in
    export (random actions' states, with the raw key scaled past VecNormalize's clip)."""
    import pickle

    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    from testkit.dict_envs import DictPendulum

    env_id = "testkit.dict_envs:DictPendulum"
    venv = VecNormalize(make_vec_env(DictPendulum, n_envs=1, seed=0), norm_obs_keys=["angle"], clip_obs=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sb3.PPO(
            "MultiInputPolicy", venv, seed=0, device="cpu", n_steps=256, batch_size=64, n_epochs=2
        )
        model.set_logger(configure(str(tmp_path / "sb3_log"), []))
        model.learn(512)
    model.save(tmp_path / "model.zip")
    venv.save(str(tmp_path / "vn.pkl"))
    assert set(venv.obs_rms) == {"angle"}

    export_source(
        source_from_sb3(tmp_path / "model.zip", env_id, tmp_path / "vn.pkl"),
        tmp_path / "art",
        ExportOptions(quantize="fp32", **OPTS),
    )
    m = load_manifest(tmp_path / "art").data
    assert m["source"]["policy"] == "MultiInputActorCriticPolicy"
    assert m["folded"]["normalization"]["raw"]["indices"] == [0]  # `rate`, first in the Dict's order
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    policy = Policy.load(tmp_path / "art")
    with open(tmp_path / "vn.pkl", "rb") as f:
        vn = pickle.load(f)
    loaded = sb3.PPO.load(str(tmp_path / "model.zip"), device="cpu")
    rng = np.random.default_rng(5)
    errors = []
    for _ in range(200):
        theta = rng.uniform(-np.pi, np.pi)
        obs = {
            "rate": np.array([rng.uniform(-8, 8)], np.float32),  # raw: beyond clip_obs=2 and passed as is
            "angle": np.array([np.cos(theta), np.sin(theta)], np.float32),
        }
        expected = loaded.predict(vn.normalize_obs({k: v[None] for k, v in obs.items()}), deterministic=True)[
            0
        ]
        errors.append(np.abs(policy.predict(obs) - expected[0]).max())
    assert max(errors) <= 1e-4, max(errors)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("algo", "env_name", "kw"),
    [
        ("A2C", "DictPendulum", {}),
        ("SAC", "DictPendulum", {"learning_starts": 100, "batch_size": 64}),
        ("TD3", "DictPendulum", {"learning_starts": 100, "batch_size": 64}),
        ("DQN", "DictCartPole", {"learning_starts": 100}),
        # with an image key: each actor or Q-network has its own CombinedExtractor with a Nature-CNN
        ("SAC", "CameraPendulum", {"learning_starts": 100, "batch_size": 32, "buffer_size": 1000}),
        ("DQN", "CameraCartPole", {"learning_starts": 100, "buffer_size": 1000}),
    ],
)
def test_multi_input_policies_of_the_other_algorithms_match_sb3_predict(
    tmp_path: Path, algo: str, env_name: str, kw: dict
) -> None:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    from testkit import dict_envs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        venv = make_vec_env(getattr(dict_envs, env_name), n_envs=1, seed=0)
        model = getattr(sb3, algo)("MultiInputPolicy", venv, seed=0, device="cpu", **kw)
        model.set_logger(configure(str(tmp_path / "sb3_log"), []))
        model.learn(300)
    model.save(tmp_path / "model.zip")
    export_source(
        source_from_sb3(tmp_path / "model.zip", f"testkit.dict_envs:{env_name}", None),
        tmp_path / "art",
        ExportOptions(quantize="fp32", **OPTS),
    )
    m = load_manifest(tmp_path / "art").data
    if env_name.startswith("Camera"):  # the frame keeps the env's channel-last shape
        assert m["observation"]["keys"][0]["shape"] in ([36, 36, 3], [36, 36, 1])
    parity = m["verification"]["tflite_vs_source"]
    if algo == "DQN":
        assert parity["disagreements_outside_ties"] == 0
    else:
        assert parity["max_abs_error"] <= 1e-4


def _camera_observations(env_name: str, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Observations the export never saw: random actions' states from seeds of their own, as the env gives
    them (channel-last uint8 frames)."""
    from testkit import dict_envs

    env = getattr(dict_envs, env_name)()
    env.action_space.seed(seed)
    out, (obs, _) = [], env.reset(seed=seed)
    while len(out) < n:
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return out


def _check_int8_camera_path(art: Path) -> None:
    """The int8 file keeps the camera float32 from its input to its first convolution (the ops that cut it
    out of the keys' vector and scale it are denylisted): quantized there, the pixels (0..255) and the
    normalized rate shared one scale and the frame was clipped to 1.7 (the export's own check missed it,
    since the untrained net's response to the camera is a few 1e-3). Its error against SB3 stays under
    1e-3, where the clipped file's was the camera's whole effect, 2.6e-3."""
    assert_float_until_first_conv(art / "policy.tflite")
    assert load_manifest(art).data["verification"]["tflite_vs_source"]["max_abs_error"] < 1e-3


def _serve_over_plc_sim(tmp_path: Path, art: Path, env_id: str, keys: list[str]) -> None:
    """plc-sim (--strict) lays the Dict out one array node per key (the camera: 3,888 values, row-major
    in its HWC shape); serve, mapped per key, gives `evaluate`'s returns on the same seeds."""
    import json

    import yaml

    from rl2edge.plc_bridge.nodemap import default_node_map
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server

    m = default_node_map()
    node_map = {
        "observation": {k: f"ns=2;s=rl2edge.Observation_{k}" for k in keys},
        "observation_seq": m.observation_seq,
        "action": m.action[0],
        "action_seq": m.action_seq,
        "heartbeat": m.heartbeat,
        "status": m.status,
    }
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(node_map))
    url, record, summary = (
        f"opc.tcp://127.0.0.1:{free_port()}",
        tmp_path / "sim.json",
        tmp_path / "serve.json",
    )
    sim = ["plc-sim", "--env", env_id, "--endpoint", url, "--seed", "3", "--episodes", "2", "--record", str(record),
           "--strict"]  # fmt: skip
    serve = ["serve", str(art), "--endpoint", url, "--period-ms", "5", *NO_MISS, "--summary", str(summary),
             "--map", str(tmp_path / "map.yaml")]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    with running(sim, tmp_path / "sim.log", {"PYTHONPATH": str(root)}) as sim_proc:
        wait_for_server(url)
        with running(serve, tmp_path / "serve.log") as serve_proc:
            assert sim_proc.wait(timeout=120) == 0, (tmp_path / "sim.log").read_text()
            assert stop(serve_proc) == 0, (tmp_path / "serve.log").read_text()
    expected = evaluate(Policy.load(art).predict, env_id, 2, 3).returns
    assert json.loads(record.read_text())["returns"] == expected
    s = json.loads(summary.read_text())
    assert s["deadline_misses"] == 0 and s["invalid"] == 0 and s["write_rejected"] == 0, s


@pytest.mark.integration  # 55 s: the integration tier, which CI runs too
def test_multi_input_ppo_with_a_camera_key_matches_sb3_predict_in_every_mode(tmp_path: Path) -> None:
    """SB3's MultiInputPolicy on a channel-last camera and a rate gyro: SB3 trains on channel-first frames
    (VecTransposeImage, which it adds itself) and runs a Nature-CNN on the camera scaled by 1/255, with
    VecNormalize on the gyro alone (`norm_obs_keys`). The artifact takes the frame as the env gives it (HWC,
    the manifest says so), transposes inside the graph, and its fp32 actions are within 1e-4 of SB3's own
    predict on 300 observations it never saw; every mode keeps the closed-loop return criterion; the int8
    file served over plc-sim's per-key array nodes gives `evaluate`'s returns; a frame in SB3's layout
    (CHW) is refused by key, never read as scrambled pixels."""
    import pickle

    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    from rl2edge.errors import ObservationError
    from testkit.dict_envs import CameraPendulum

    venv = VecNormalize(make_vec_env(CameraPendulum, n_envs=1, seed=0), norm_obs_keys=["rate"], clip_obs=5.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sb3.PPO(
            "MultiInputPolicy", venv, seed=0, device="cpu", n_steps=128, batch_size=64, n_epochs=1
        )
        model.set_logger(configure(str(tmp_path / "sb3_log"), []))
        model.learn(256)
    assert model.observation_space["camera"].shape == (3, 36, 36)  # SB3 transposed the env's (36, 36, 3)
    model.save(tmp_path / "model.zip")
    venv.save(str(tmp_path / "vn.pkl"))
    export_source(
        source_from_sb3(tmp_path / "model.zip", "testkit.dict_envs:CameraPendulum", tmp_path / "vn.pkl"),
        tmp_path / "art",
        ExportOptions(quantize="all", **OPTS),
    )
    m = load_manifest(tmp_path / "art" / "fp32").data
    keys = {k["name"]: k for k in m["observation"]["keys"]}
    assert list(keys) == ["camera", "rate"]
    assert keys["camera"]["shape"] == [36, 36, 3] and keys["camera"]["dtype"] == "uint8"
    assert m["model"]["input"]["keys"] == [
        {"name": "camera", "shape": [1, 3888]},
        {"name": "rate", "shape": [1, 1]},
    ]
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    # the export's own return criterion held in every mode, or it would have failed
    for mode in ("fp16", "dynamic", "int8"):
        closed = load_manifest(tmp_path / "art" / mode).data["verification"]["closed_loop"]
        assert len(closed["this_file"]["returns"]) == OPTS["eval_episodes"], mode

    with open(tmp_path / "vn.pkl", "rb") as f:
        vn = pickle.load(f)
    loaded = sb3.PPO.load(str(tmp_path / "model.zip"), device="cpu")
    observations = _camera_observations("CameraPendulum", 300, seed=77)
    expected = np.concatenate(
        [
            loaded.predict(vn.normalize_obs({k: v[None] for k, v in obs.items()}), deterministic=True)[0]
            for obs in observations
        ]
    )
    for backend in ("auto", "onnxruntime"):  # the TFLite file, and the ONNX graph it came from
        policy = Policy.load(tmp_path / "art" / "fp32", backend=backend)
        got = np.stack([policy.predict(obs) for obs in observations])
        assert np.abs(got - expected).max() <= 1e-4, backend
    _check_int8_camera_path(tmp_path / "art" / "int8")
    _serve_over_plc_sim(
        tmp_path, tmp_path / "art" / "int8", "testkit.dict_envs:CameraPendulum", ["camera", "rate"]
    )
    obs = observations[0]
    flat = {"camera": obs["camera"].reshape(-1), "rate": obs["rate"]}  # as a PLC array holds it
    assert np.array_equal(policy.predict(flat), policy.predict(obs))
    with pytest.raises(
        ObservationError, match=r"key 'camera' is a \(36, 36, 3\) frame; got shape \(3, 36, 36\)"
    ):
        policy.predict({"camera": obs["camera"].transpose(2, 0, 1), "rate": obs["rate"]})
