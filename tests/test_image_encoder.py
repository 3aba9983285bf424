"""Image keys in rl2edge's own PPO and A2C: the Nature-CNN encoder (train.core.encoder_spec) in torch,
TensorFlow and the numpy rollout, and a camera key from `train` to an int8 file.

Tolerances: a convolution sums 64-1,600 float32 products, and each backend sums them in its own order
(oneDNN, Eigen, numpy's BLAS), so outputs agree to a few 1e-7 relative, never bit for bit; the gradients of
a conv weight sum over the batch and every output position as well (thousands of terms): 1e-5 absolute on
gradients of order 1e-2..1. No test compares a discrete choice where the two best logits are close.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rl2edge.cli.app import main
from rl2edge.errors import ConfigError
from rl2edge.runtime.policy import Policy
from rl2edge.specs import ActionTransform, ObservationSpec
from rl2edge.train.core.encoder_spec import encoder_spec, image_mask
from rl2edge.train.core.numpy_policy import NumpyActorCritic
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.core.spaces import observation_spec
from testkit.agents import make_agent, network
from testkit.tflite_ops import assert_float_until_first_conv

pytestmark = pytest.mark.integration  # TensorFlow and training runs: the integration tier

CAMERA_CARTPOLE = "testkit.dict_envs:CameraCartPole"  # 36x36x1 uint8, channel-last, and a vector key
CAMERA_PENDULUM = "testkit.dict_envs:CameraPendulum"  # 36x36x3 uint8, channel-last, Box action

# A channel-first float frame (not scaled: SB3 scales uint8 frames only) between two vector keys.
CHW_SPACE = gym.spaces.Dict(
    [
        ("imu", gym.spaces.Box(-1.0, 1.0, (3,), np.float32)),
        ("depth", gym.spaces.Box(0.0, 10.0, (2, 40, 44), np.float32)),
        ("speed", gym.spaces.Box(-2.0, 2.0, (1,), np.float32)),
    ]
)


def _samples(space: gym.Space, n: int, seed: int) -> np.ndarray:
    space.seed(seed)
    spec = observation_spec(space)
    return np.stack([spec.flatten(space.sample()) for _ in range(n)]).astype(np.float32)


def _spec_and_obs(which: str, n: int = 16) -> tuple[ObservationSpec, np.ndarray]:
    if which == "chw":
        return observation_spec(CHW_SPACE), _samples(CHW_SPACE, n, 0)
    from testkit import dict_envs

    env = dict_envs.CameraPendulum() if which == "hwc3" else dict_envs.CameraCartPole()
    return observation_spec(env.observation_space), _samples(env.observation_space, n, 0)


def _agents(spec: ObservationSpec, discrete: bool, algo: str = "ppo", **cfg: object):
    """Torch and TF agents of one network, the TF one holding the torch one's weights."""
    net = network(algo, spec.size, 2 if discrete else 1, discrete=discrete, encoder=encoder_spec(spec), **cfg)
    torch_agent = make_agent(algo, "torch", net, "CartPole-v1" if discrete else "Pendulum-v1", 0)
    tf_agent = make_agent(algo, "tf", net, "CartPole-v1" if discrete else "Pendulum-v1", 0)
    tf_agent.policy.copy_from_torch(torch_agent.policy.state_dict())
    return net, torch_agent, tf_agent


@pytest.mark.parametrize(("which", "discrete"), [("hwc1", True), ("hwc3", False), ("chw", False)])
def test_torch_tf_and_the_numpy_rollout_act_alike(which: str, discrete: bool) -> None:
    """The rollout's numpy encoder (what PPO acts with, here and in Ray workers) against both frameworks'
    `act` on the same weights: the same sampled actions, log-probs and values within float32 rounding."""
    spec, obs = _spec_and_obs(which)
    net, torch_agent, tf_agent = _agents(spec, discrete)
    noise_rng = np.random.default_rng(1)
    noise = noise_rng.gumbel(size=(len(obs), 2)) if discrete else noise_rng.standard_normal((len(obs), 1))
    noise = noise.astype(np.float32)
    numpy_policy = NumpyActorCritic(net)
    results = {}
    for name, agent in (("torch", torch_agent), ("tf", tf_agent)):
        numpy_policy.load(agent.rollout_weights())
        results[name] = agent.act(obs, noise)
        results[f"numpy<-{name}"] = numpy_policy.act(obs, noise)
    ref = results["torch"]
    if discrete:  # the choice: no row may be a near tie (then a 1e-7 difference could flip it)
        numpy_policy.load(torch_agent.rollout_weights())
        w = numpy_policy._w
        assert w is not None
        perturbed = np.sort(numpy_policy._mlp(w.actor, numpy_policy._features(obs)) + noise, axis=-1)
        assert (perturbed[:, -1] - perturbed[:, -2]).min() > 1e-3
    for name, (action, logp, value) in results.items():
        if discrete:
            np.testing.assert_array_equal(action, ref[0], err_msg=name)
        else:
            np.testing.assert_allclose(action, ref[0], atol=1e-5, err_msg=name)
        np.testing.assert_allclose(logp, ref[1], atol=1e-5, err_msg=name)
        np.testing.assert_allclose(value, ref[2], atol=1e-5, err_msg=name)
    # the encoder matters: the camera changes the value (an encoder that ignored it would pass the above)
    moved = obs.copy()
    for k, (_, part) in zip(spec.keys, spec.key_slices, strict=True):
        if k.is_image:
            moved[:, part] = 0.0
    assert np.abs(torch_agent.act(moved, noise)[2] - ref[2]).max() > 1e-4


@pytest.mark.parametrize("algo", ["ppo", "a2c"])
def test_torch_and_tf_give_the_same_loss_and_gradients_through_the_cnn(algo: str) -> None:
    """The loss (PPO's clipped surrogate, A2C's) on copied weights, and every gradient, the encoder's
    convolutions included, in both frameworks."""
    import tensorflow as tf

    spec, obs = _spec_and_obs("hwc3", 32)
    _, torch_agent, tf_agent = _agents(spec, discrete=False, algo=algo, log_std_init=-0.3)
    rng = np.random.default_rng(2)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    mb = Minibatch(obs, f(32, 1), f(32) - 1.0, f(32), f(32), f(32))

    assert torch_agent.autograd, "an encoder trains through autograd (no written-out backward)"
    loss_t, _ = torch_agent.loss(mb, 0.2)
    torch_agent.policy.zero_grad()
    loss_t.backward()
    grads_t = {k: p.grad.numpy() for k, p in torch_agent.policy.named_parameters()}

    with tf.GradientTape() as tape:
        loss_f, _ = tf_agent.loss_fn(
            mb.obs, mb.actions, mb.old_logprobs, mb.old_values, mb.advantages, mb.returns, tf.constant(0.2)
        )
    pairs = tf_agent.policy._pairs()
    grads_f = tape.gradient(loss_f, [v for _, v in pairs])
    assert sorted(name for name, _ in pairs) == sorted(grads_t)  # every parameter, the encoder's too
    assert abs(float(loss_f) - loss_t.item()) < 1e-5
    conv = "encoder.cnns.camera.cnn.0.weight"
    assert np.abs(grads_t[conv]).max() > 1e-4  # the first conv learns: its gradient is not zero
    for (name, _), g in zip(pairs, grads_f, strict=True):
        g = g.numpy()
        if name.endswith(".weight"):
            g = g.transpose(3, 2, 0, 1) if g.ndim == 4 else g.T
        np.testing.assert_allclose(g, grads_t[name], atol=1e-5, rtol=0, err_msg=name)


def test_tf_traces_once_over_a_camera_run(tmp_path: Path) -> None:
    """The TF agent with an encoder over a run of several updates: one trace per compiled function."""
    from rl2edge.train.algos import build_config, train

    cfg = build_config(CAMERA_CARTPOLE, overrides={"n_timesteps": 1024, "n_steps": 64, "n_envs": 4,
                                                   "batch_size": 64, "n_epochs": 2, "eval_freq": 512,
                                                   "eval_episodes": 1}, algo="ppo")  # fmt: skip
    agents: list = []
    train("tf", CAMERA_CARTPOLE, cfg, 0, tmp_path / "run", device="cpu", progress=False, agent_out=agents)
    assert agents[0].trace_counts() == {"act": 1, "deterministic": 1, "train_step": 0, "train_many": 1}
    assert int(agents[0].updates.numpy()) == 4 * 2 * 4  # 4 updates x 2 epochs x 4 minibatches


def test_an_algorithm_without_an_encoder_refuses_an_image_key_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An algorithm row whose networks take no encoder (a new one, say: here SAC's row with the flag off)
    refuses a camera key before anything is written, naming the key and the routes that take it."""
    import dataclasses

    from rl2edge.train import algos

    monkeypatch.setitem(algos.ALGOS, "sac", dataclasses.replace(algos.get("sac"), image_keys=False))
    argv = [
        "train",
        "--algo",
        "sac",
        "--env",
        CAMERA_PENDULUM,
        "--steps",
        "64",
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "key 'camera' is an image (36, 36, 3)" in err and "SAC does not take them" in err, err
    assert "--algo ppo" in err and "MultiInputPolicy" in err, err
    assert not (tmp_path / "run").exists()


def test_a_replay_buffer_that_would_not_fit_in_memory_is_refused_before_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Camera frames in float32 at SB3's default buffer_size would fill the memory hours into the run:
    refused when the buffer is made, with the figure and what to change (here against a 24 GiB limit, as
    a container's or this machine's; the limit itself is read from cgroup and sysconf)."""
    from rl2edge.train.core import replay

    assert (replay.memory_limit() or 0) > 2**30  # something is read on this Linux machine
    monkeypatch.setattr(replay, "memory_limit", lambda: 24 * 2**30)
    with pytest.raises(
        ConfigError, match=r"1,000,000 transitions of 21,168 float32 .* 157.7 GiB .* 24.0 GiB"
    ):
        replay.ReplayBuffer(10**6, (84 * 84 * 3,), True, 4)
    assert len(replay.ReplayBuffer(1000, (36 * 36 * 3 + 1,), False, 1)) == 0  # a small one is made as before


def _camera_batch(spec: ObservationSpec, n: int, b: int, discrete: bool, seed: int = 0):
    """A replay batch of camera observations (normalized: pixels raw, 0..255)."""
    from rl2edge.train.core.replay import ReplayBatch

    rng = np.random.default_rng(seed)
    obs = lambda: _samples_of(spec, n * b, rng).reshape(n, b, -1)  # noqa: E731
    actions = rng.integers(0, 2, (n, b)) if discrete else rng.uniform(-1, 1, (n, b, 1)).astype(np.float32)
    f = lambda: rng.standard_normal((n, b)).astype(np.float32)  # noqa: E731
    return ReplayBatch(obs(), actions, f(), obs(), (rng.random((n, b)) < 0.1).astype(np.float32))


def _samples_of(spec: ObservationSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    pixels = image_mask(spec)
    assert pixels is not None  # uint8 frames
    out = rng.standard_normal((n, spec.size)).astype(np.float32)
    out[:, pixels] = rng.integers(0, 256, (n, int(pixels.sum())))
    return out


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_off_policy_targets_carry_their_encoders(framework: str) -> None:
    """The target networks' encoders move with their networks: SAC's critic targets (encoder included)
    by exactly tau after a training step, DQN's target (encoder included) a copy at each sync; and an
    encoder is among the variables each optimizer steps."""
    spec, _ = _spec_and_obs("hwc3")
    enc = encoder_spec(spec)
    sac = make_agent("sac", framework, network("sac", spec.size, 1, encoder=enc, net_arch=[16, 16]),
                     "Pendulum-v1", 0, tau=0.25)  # fmt: skip
    n_plain = len(make_agent("sac", framework, network("sac", spec.size, 1, net_arch=[16, 16]),
                             "Pendulum-v1", 0).variables("critic"))  # fmt: skip
    before_s, before_t = sac.variables("critic"), sac.variables("critic_target")
    assert len(before_t) == len(before_s) == n_plain + 8  # 3 convs and a linear layer: kernel and bias each
    sac.train(_camera_batch(spec, 1, 8, discrete=False))
    after_s, after_t = sac.variables("critic"), sac.variables("critic_target")
    moved = [not np.array_equal(a, b) for a, b in zip(before_s, after_s, strict=True)]
    assert all(moved[-8:]) or all(moved[:8])  # the critics' encoder learned (wherever it sits in the list)
    for s_, t0, t1 in zip(after_s, before_t, after_t, strict=True):
        np.testing.assert_allclose(t1, t0 + 0.25 * (s_ - t0), atol=1e-6)

    cart, _ = _spec_and_obs("hwc1")
    dqn = make_agent("dqn", framework, network("dqn", cart.size, 2, encoder=encoder_spec(cart), net_arch=[16]),
                     "CartPole-v1", 0)  # fmt: skip
    dqn.train(_camera_batch(cart, 2, 8, discrete=True))
    online, target = dqn.variables("q"), dqn.variables("q_target")
    assert any(not np.array_equal(a, b) for a, b in zip(online, target, strict=True))
    dqn.update_target()
    for a, b in zip(dqn.variables("q"), dqn.variables("q_target"), strict=True):
        np.testing.assert_array_equal(a, b)


# Every algorithm, both backends, briefly trained on a camera env and exported int8 (about 3 minutes).
CAMERA_MATRIX = [
    ("ppo", CAMERA_CARTPOLE, {"n_steps": 64, "n_envs": 2, "batch_size": 64, "n_epochs": 1}),
    ("a2c", CAMERA_PENDULUM, {"n_envs": 2}),
    ("dqn", CAMERA_CARTPOLE, {"learning_starts": 100, "batch_size": 32}),
    ("rainbow", CAMERA_CARTPOLE, {"learning_starts": 100, "batch_size": 32}),
    ("sac", CAMERA_PENDULUM, {"learning_starts": 100, "batch_size": 32}),
    ("td3", CAMERA_PENDULUM, {"learning_starts": 100, "batch_size": 32}),
]


def _diagonal(cases: list[tuple[Any, ...]], first: int = 0) -> list[Any]:
    """Each case in both frameworks; in the integration tier one framework per case, alternating from
    `first` (0: torch), the other marked slow (`make test-all`): the encoder is each backend's own and
    each backend's is covered in the tier, so CI pays each algorithm's training and int8 export once."""
    out = []
    for i, case in enumerate(cases):
        for j, framework in enumerate(("torch", "tf")):
            marks = () if (i + first) % 2 == j else (pytest.mark.slow,)
            out.append(pytest.param(*case, framework, marks=marks, id=f"{case[0]}-{framework}"))
    return out


@pytest.mark.parametrize(("algo", "env_id", "overrides", "framework"), _diagonal(CAMERA_MATRIX))
def test_every_algorithm_trains_and_exports_a_camera_env(
    tmp_path: Path, algo: str, env_id: str, overrides: dict, framework: str
) -> None:
    """300 steps, then an int8 file: the network spec has the encoder, the export's parity checks pass
    (or it fails), the file takes the camera as one input and keeps it float32 up to its first conv."""
    from rl2edge.train.core.checkpoint import load_checkpoint
    from testkit.runs import export_run, tiny_train

    run = tiny_train(env_id, tmp_path / "run", steps=300, algo=algo, framework=framework, **overrides)
    encoder = load_checkpoint(run).network.encoder
    assert encoder is not None and encoder.keys[0].name == "camera" and encoder.keys[0].image
    export_run(run, tmp_path / "art", "int8")
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["model"]["input"]["keys"][0]["name"] == "camera"
    assert_float_until_first_conv(tmp_path / "art" / "policy.tflite")


def test_a_frame_too_small_for_the_nature_cnn_is_refused() -> None:
    space = gym.spaces.Dict([("cam", gym.spaces.Box(0, 255, (24, 24, 1), np.uint8))])
    with pytest.raises(ConfigError, match=r"observation image 'cam' is 24x24: .* at least 36x36"):
        encoder_spec(observation_spec(space))


def test_only_uint8_frames_are_scaled_and_left_raw() -> None:
    """SB3's rule (is_image_space): a uint8 frame bounded [0, 255] is scaled by 1/255 in the network and
    its pixels left out of the normalization; a float frame (a depth map) is normalized like any value."""
    pendulum, _ = _spec_and_obs("hwc3")
    mask = image_mask(pendulum)
    assert mask is not None and mask[: 36 * 36 * 3].all() and not mask[36 * 36 * 3 :].any()
    pendulum_encoder = encoder_spec(pendulum)
    assert pendulum_encoder is not None and pendulum_encoder.keys[0].scale == pytest.approx(1 / 255)
    depth = observation_spec(CHW_SPACE)
    assert image_mask(depth) is None
    depth_encoder = encoder_spec(depth)
    assert depth_encoder is not None and depth_encoder.keys[1].to_json() | {"size": 0} == {
        "name": "depth", "size": 0, "image": True, "shape": [2, 40, 44], "channels_last": False, "scale": 1.0
    }  # fmt: skip


# ppo, sac and td3 in the framework the matrix above leaves to the slow tier
KEPT = {("ppo", "tf"), ("sac", "tf"), ("td3", "torch")}


@pytest.mark.parametrize(
    ("algo", "framework"),
    [pytest.param(a, f, marks=() if (a, f) in KEPT else (pytest.mark.slow,), id=f"{a}-{f}")
     for a in ("ppo", "sac", "td3") for f in ("torch", "tf")],
)  # fmt: skip
def test_a_camera_policy_trained_here_is_the_policy_the_artifact_runs(
    tmp_path: Path, framework: str, algo: str
) -> None:
    """Through the real main(): PPO, SAC or TD3 on the colour camera and the rate gyro, exported int8. The fp32 file's
    actions equal the trained agent's on observations it never saw, normalized by hand from the
    checkpoint's statistics with the pixels raw (the artifact must not normalize them: training did not);
    the int8 file keeps the frame float32 up to the first convolution; the manifest says which values are
    left raw; the file takes the camera as one input."""
    from rl2edge.train.algos import build_config, train
    from rl2edge.train.core.checkpoint import load_checkpoint

    run, art = tmp_path / "run", tmp_path / "art"
    over = ({"n_steps": 256, "n_envs": 2, "batch_size": 128, "n_epochs": 2} if algo == "ppo"
            else {"learning_starts": 200, "batch_size": 32})  # fmt: skip
    steps = 1024 if algo == "ppo" else 400
    cfg = build_config(CAMERA_PENDULUM, overrides={"n_timesteps": steps, "eval_freq": 0, "eval_episodes": 1,
                                                   **over}, algo=algo)  # fmt: skip
    agents: list = []
    run.mkdir()
    train(framework, CAMERA_PENDULUM, cfg, 0, run, device="cpu", progress=False, agent_out=agents)
    assert main(["export", str(run), "--quantize", "all", "--out", str(art), "--calib-episodes", "2",
                 "--eval-episodes", "2", "--no-progress"]) == 0  # fmt: skip

    ckpt = load_checkpoint(run)
    assert ckpt.network.encoder is not None and ckpt.network.encoder.keys[0].image is True
    spec = ckpt.observation
    pixels = image_mask(spec)
    assert pixels is not None and pixels.sum() == 36 * 36 * 3
    stats = ckpt.normalization
    mean, var = np.asarray(stats["mean"]), np.asarray(stats["var"])
    assert (
        var[pixels].std() > 0
    )  # the statistics did move over the pixels: a file that used them would differ

    from testkit import dict_envs

    env = dict_envs.CameraPendulum()
    obs = _samples(env.observation_space, 24, seed=7)
    normalized = obs.copy()
    vec = ~pixels
    normalized[:, vec] = np.clip(
        (obs[:, vec] - mean[vec]) / np.sqrt(var[vec] + stats["eps"]), -stats["clip"], stats["clip"]
    )
    assert not ckpt.action.discrete
    expected = ActionTransform(ckpt.action).to_env(agents[0].deterministic(normalized))
    fp32 = Policy.load(art / "fp32")
    for row, want in zip(obs, expected, strict=True):
        got = fp32.predict(spec.split(row))
        np.testing.assert_allclose(got, want, atol=1e-4)  # float32 convs in two engines; actions span +-2

    manifest = json.loads((art / "int8" / "manifest.json").read_text())
    raw = manifest["folded"]["normalization"]["raw"]["indices"]
    assert raw == np.flatnonzero(pixels).tolist()
    assert [k["name"] for k in manifest["model"]["input"]["keys"]] == ["camera", "rate"]
    assert_float_until_first_conv(art / "int8" / "policy.tflite")
    # int8 against fp32: the export's own criteria (the closed-loop return) passed, or main() returned 1


def test_a_128x128_colour_camera_manifest_fits_the_runtime_limit() -> None:
    """The manifest's per-value lists (a key's bounds, the concatenation's, the folded mean and inv_std,
    the raw indices) for a 128x128x3 frame: indented one value per line they pass the runtime's 4 MiB
    limit; written with lists on one line, as write_manifest does, they fit, and parse back the same."""
    from rl2edge.fileio import json_text
    from rl2edge.runtime.manifest_schema import MAX_MANIFEST_BYTES

    n = 128 * 128 * 3
    rng = np.random.default_rng(0)
    stats = rng.normal(size=n).astype(np.float32).astype(float).tolist()
    lists = {
        "key": {"low": [0.0] * n, "high": [255.0] * n},
        "observation": {"low": [0.0] * n, "high": [255.0] * n},
        "folded": {"mean": stats, "inv_std": stats, "raw": {"indices": list(range(n))}},
    }
    assert len(json.dumps(lists, indent=2)) > MAX_MANIFEST_BYTES
    text = json_text(lists)
    assert len(text) < MAX_MANIFEST_BYTES and json.loads(text) == lists
