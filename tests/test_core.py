"""The framework-neutral core: normalization, GAE, minibatches, schedules, presets, env resolution."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ActionTransform
from rl2edge.train.algos import build_config
from rl2edge.train.core.config import A2CConfig
from rl2edge.train.core.envs import check_env_id, make_env
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.rollout import Minibatch, RolloutBuffer, check_minibatch, compute_gae
from rl2edge.train.core.schedules import Schedule


def test_running_normalizer_matches_numpy_over_batches() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(1000, 3))
    norm = RunningNormalizer((3,))
    for chunk in np.array_split(data, 7):
        norm.update(chunk)
    np.testing.assert_allclose(norm.mean, data.mean(0), rtol=1e-6)
    np.testing.assert_allclose(norm.var, data.var(0), rtol=1e-4)
    restored = RunningNormalizer.from_dict((3,), norm.to_dict())
    np.testing.assert_array_equal(restored.normalize(data[:5]), norm.normalize(data[:5]))


def test_normalizer_clips_and_can_be_off() -> None:
    norm = RunningNormalizer((1,), clip=5.0)
    norm.update(np.array([[0.0], [1.0]]))
    assert norm.normalize(np.array([[1e6]]))[0, 0] == 5.0
    off = RunningNormalizer((1,), enabled=False)
    off.update(np.array([[100.0]]))
    assert off.normalize(np.array([[7.0]]))[0, 0] == 7.0


def gae_reference(rewards, values, dones, last, gamma, lam):
    """Textbook GAE in float64, one env at a time."""
    t_max, n = rewards.shape
    adv = np.zeros((t_max, n))
    for e in range(n):
        running = 0.0
        for t in reversed(range(t_max)):
            nxt = last[e] if t == t_max - 1 else values[t + 1, e]
            delta = rewards[t, e] + gamma * nxt * (1 - dones[t, e]) - values[t, e]
            running = delta + gamma * lam * (1 - dones[t, e]) * running
            adv[t, e] = running
    return adv, adv + values


def test_gae_matches_reference_with_episode_ends() -> None:
    rng = np.random.default_rng(1)
    r = rng.normal(size=(16, 3)).astype(np.float32)
    v = rng.normal(size=(16, 3)).astype(np.float32)
    d = (rng.random((16, 3)) < 0.2).astype(np.float32)
    last = rng.normal(size=3).astype(np.float32)
    adv, ret = compute_gae(r, v, d, last, 0.98, 0.8)
    ref_adv, ref_ret = gae_reference(r, v, d, last, 0.98, 0.8)
    assert adv.dtype == np.float32 and ret.dtype == np.float32
    np.testing.assert_allclose(adv, ref_adv, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, atol=1e-5)


def test_minibatches_cover_the_rollout_once_and_normalize_advantages() -> None:
    buf = RolloutBuffer(8, 4, (2,), discrete=True, act_dim=2)
    rng = np.random.default_rng(0)
    for t in range(8):
        buf.add(
            np.full((4, 2), t, np.float32),
            np.arange(4) % 2,
            np.zeros(4),
            np.zeros(4),
            rng.normal(size=4),
            np.zeros(4),
        )
    buf.finish(np.zeros(4, np.float32), 0.99, 0.95)
    batches = list(buf.minibatches(8, np.random.default_rng(0), normalize_advantage=True))
    assert len(batches) == 4
    seen = np.concatenate([b.obs[:, 0] for b in batches])
    assert sorted(seen.tolist()) == sorted(np.repeat(np.arange(8), 4).tolist())
    for b in batches:
        assert abs(float(b.advantages.mean())) < 1e-5
        assert abs(float(b.advantages.std()) - 1.0) < 1e-3


def _mb(obs_dtype=np.float32, actions=None) -> Minibatch:
    z = np.zeros(4, np.float32)
    acts = np.zeros(4, np.int64) if actions is None else actions
    return Minibatch(np.zeros((4, 3), obs_dtype), acts, z, z, z, z)


def test_batch_contract_rejects_wrong_dtypes_at_the_boundary() -> None:
    check_minibatch(_mb(), (3,), discrete=True, n_actions=2)
    with pytest.raises(ConfigError, match="float32"):
        check_minibatch(_mb(obs_dtype=np.float64), (3,), discrete=True, n_actions=2)
    with pytest.raises(ConfigError, match="integer"):
        check_minibatch(_mb(actions=np.zeros(4, np.float32)), (3,), discrete=True, n_actions=2)
    with pytest.raises(ConfigError, match="lie in"):
        check_minibatch(_mb(actions=np.array([0, 1, 2, 0])), (3,), discrete=True, n_actions=2)


def test_schedules_parse_zoo_notation() -> None:
    lin = Schedule.parse("lin_1e-3", "lr")
    assert lin(1.0) == pytest.approx(1e-3) and lin(0.5) == pytest.approx(5e-4)
    assert Schedule.parse(0.2, "clip")(0.1) == 0.2
    with pytest.raises(ConfigError, match="lin_"):
        Schedule.parse("fast", "lr")


def test_config_layers_preset_file_and_cli(tmp_path) -> None:
    cfg = build_config("CartPole-v1")
    assert (cfg.n_envs, cfg.n_steps, cfg.batch_size, cfg.n_epochs) == (8, 32, 256, 20)
    assert cfg.learning_rate.linear and cfg.gamma == 0.98
    f = tmp_path / "hp.yml"
    f.write_text("CartPole-v1:\n  n_epochs: 3\n  gamma: 0.9\n")
    cfg = build_config("CartPole-v1", f, {"n_timesteps": 1234})
    assert (cfg.n_epochs, cfg.gamma, cfg.n_timesteps, cfg.n_envs) == (3, 0.9, 1234, 8)
    f.write_text("n_epoch: 3\n")
    with pytest.raises(ConfigError, match="unknown PPO hyperparameter 'n_epoch'"):
        build_config("CartPole-v1", f)
    with pytest.raises(ConfigError, match="does not exist"):
        build_config("CartPole-v1", tmp_path / "missing.yml")


@dataclasses.dataclass
class ToyConfig(A2CConfig):
    algo = "toy"


def test_a_row_is_all_the_table_needs_to_add_an_algorithm(tmp_path, monkeypatch) -> None:
    """A toy algorithm in one row, with its own preset file: the config lookup and the run's checks read it."""
    from rl2edge.train import algos

    preset = tmp_path / "toy.yml"
    preset.write_text("CartPole-v1:\n  n_steps: 7\n")
    toy = dataclasses.replace(
        algos.get("a2c"), name="toy", config=f"{__name__}:ToyConfig", preset=str(preset), compiled={}
    )
    monkeypatch.setitem(algos.ALGOS, "toy", toy)
    cfg = algos.build_config("CartPole-v1", algo="toy")
    assert isinstance(cfg, ToyConfig) and cfg.n_steps == 7
    assert "TOY" in algos.on_policy_names()
    algos.check_rollout_workers(cfg, 1)  # on-policy by its row
    with pytest.raises(ConfigError, match="TensorFlow's PPO and A2C already"):  # the row's note
        algos.check_compile("toy", "tf")
    with pytest.raises(
        ConfigError, match="TOY's torch update has no compiled form yet; it is there for torch"
    ):
        algos.check_compile("toy", "torch")
    with pytest.raises(ConfigError, match="spreads on-policy rollouts"):
        algos.check_rollout_workers(algos.build_config("Pendulum-v1", algo="sac"), 1)


def test_env_ids_registered_and_user_class() -> None:
    check_env_id("CartPole-v1")
    env = make_env("tests.fixtures.user_env:TargetEnv")
    obs, _ = env.reset(seed=3)
    assert obs.shape == (1,)
    with pytest.raises(ConfigError, match="unknown environment id 'NoSuchEnv-v9'"):
        check_env_id("NoSuchEnv-v9")
    with pytest.raises(ConfigError, match="cannot import module"):
        check_env_id("no_such_package.mod:Env")


def test_action_transform_unscales_and_clips() -> None:
    t = ActionTransform(ActionSpec.from_json({"type": "box", "shape": [1], "low": [-2.0], "high": [2.0]}))
    np.testing.assert_array_equal(t.to_env(np.array([0.5, 3.0, -9.0], np.float32)), [1.0, 2.0, -2.0])
    d = ActionTransform(ActionSpec.from_json({"type": "discrete", "n": 3, "start": 1}))
    assert int(d.to_env(np.array(2))) == 3


def test_specs_round_trip_and_name_the_two_action_sizes() -> None:
    """rl2edge.specs: the JSON the checkpoint and the manifest write, unchanged through the types; the
    action's length (what the PLC gets) and the network's output width are two names, not one `act_dim`."""
    from rl2edge.specs import ActionSpec, ObservationSpec

    discrete = {"type": "discrete", "n": 3, "start": 1}
    box = {"type": "box", "shape": [2], "dtype": "float32", "low": [-1.0, 0.0], "high": [1.0, 2.0]}
    obs = {
        "type": "box",
        "shape": [4],
        "dtype": "float32",
        "low": [None] * 4,
        "high": [None] * 4,
        "layout": "flat",
    }
    assert ActionSpec.from_json(discrete).to_json() == discrete and ActionSpec.from_json(box).to_json() == box
    assert ObservationSpec.from_json(obs).to_json() == obs and ObservationSpec.from_json(obs).size == 4
    d, b = ActionSpec.from_json(discrete), ActionSpec.from_json(box)
    assert (d.size, d.output_width, b.size, b.output_width) == (1, 3, 2, 2)
    assert d.discrete and not b.discrete
