"""MultiDiscrete and MultiBinary actions (several valves, selector switches): PPO, A2C and their recurrent
forms in both backends, one categorical head per component.

The default tier holds the spaces, the manifest, the head's arithmetic against SB3's own
MultiCategoricalDistribution, and the refusals through `main()`. The integration tier trains PPO on a
three-valve tank in both backends, exports int8, and serves it over OPC UA to plc-sim (one array node) and
to the node-opcua stand-in (one Int16 or Boolean node per valve), with faults that must write the map's
per-component safe action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import yaml

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ActionTransform
from rl2edge.train.core.spaces import action_spec

ROOT = Path(__file__).resolve().parents[1]
VALVES = "testkit.matrix_plants:ThreeValves"
BINARY = "testkit.matrix_plants:ThreeValvesBinary"
PUMP = "testkit.matrix_plants:ValveAndPump"


def test_multi_spaces_become_one_index_per_component() -> None:
    md = action_spec(gym.spaces.MultiDiscrete([2, 3], start=[0, 1]))
    assert (md.kind, md.nvec, md.starts, md.binary) == ("multi_discrete", (2, 3), (0, 1), False)
    assert (md.size, md.output_width, md.categorical, md.discrete) == (2, 5, True, False)
    lo, hi = md.index_bounds
    assert lo.tolist() == [0, 1] and hi.tolist() == [1, 3]
    assert ActionSpec.from_json(md.to_json()) == md
    mb = action_spec(gym.spaces.MultiBinary(3))
    assert (mb.nvec, mb.starts, mb.binary, mb.output_width) == ((2, 2, 2), (0, 0, 0), True, 6)
    assert ActionSpec.from_json(json.loads(json.dumps(mb.to_json()))) == mb
    # the env gets each component's index plus its start
    assert ActionTransform(md).to_env(np.array([1, 2])).tolist() == [1, 3]
    with pytest.raises(ConfigError, match="MultiDiscrete action must be 1-D"):
        action_spec(gym.spaces.MultiDiscrete([[2, 2], [2, 2]]))
    with pytest.raises(ConfigError, match="MultiBinary action must be 1-D"):
        action_spec(gym.spaces.MultiBinary([2, 2]))


def test_manifest_schema_checks_a_multi_discrete_action() -> None:
    from rl2edge.errors import ManifestError
    from rl2edge.runtime.manifest_schema import _check_action

    _check_action({"type": "multi_discrete", "nvec": [2, 3], "start": [0, 1], "binary": False})
    for bad, where in (
        ({"type": "multi_discrete", "nvec": [2, 1], "start": [0, 0]}, "action.nvec"),
        ({"type": "multi_discrete", "nvec": [2, 3], "start": [0]}, "action.start"),
        ({"type": "multi_discrete", "nvec": [], "start": []}, "action.nvec"),
        ({"type": "multi_discrete", "nvec": [2], "start": [0], "binary": "yes"}, "action.binary"),
    ):
        with pytest.raises(ManifestError, match=where.replace(".", r"\.")):
            _check_action(bad)


def test_the_heads_log_probs_and_entropy_are_sb3s_multi_categorical() -> None:
    """torch's ActorCritic, TF's, and the numpy rollout against SB3's MultiCategoricalDistribution on the
    same logits and actions. float32 in each (SB3's too): within 1e-5 over 3 components."""
    import tensorflow as tf
    import torch
    from stable_baselines3.common.distributions import MultiCategoricalDistribution

    from rl2edge.train.core.numpy_policy import argmax_heads, sample_categorical
    from rl2edge.train.tf_backend.nets import TFActorCritic
    from rl2edge.train.torch_backend.nets import ActorCritic

    nvec = (2, 3, 4)
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (64, sum(nvec))).astype(np.float32)
    noise = rng.gumbel(size=logits.shape).astype(np.float32)

    sb3 = MultiCategoricalDistribution(list(nvec)).proba_distribution(torch.from_numpy(logits))
    actions, logp_np = sample_categorical(logits, noise, nvec)
    assert actions.shape == (64, 3) and actions.dtype == np.int64
    for i, (a, b) in enumerate(zip([0, 2, 5], [2, 5, 9], strict=True)):  # Gumbel-max: argmax per slice
        assert np.array_equal(actions[:, i], (logits[:, a:b] + noise[:, a:b]).argmax(-1))
    want_logp = sb3.log_prob(torch.from_numpy(actions)).numpy()
    want_entropy = sb3.entropy().numpy()
    np.testing.assert_allclose(logp_np, want_logp, atol=1e-5)

    net = ActorCritic(4, sum(nvec), True, [8], nvec=nvec)
    terms = net.action_terms(torch.from_numpy(logits), torch.from_numpy(actions))
    np.testing.assert_allclose(terms.logp.numpy(), want_logp, atol=1e-5)
    np.testing.assert_allclose(terms.entropy.numpy(), want_entropy, atol=1e-5)
    assert np.array_equal(argmax_heads(logits, nvec), sb3.mode().numpy())

    tf_net = TFActorCritic(4, sum(nvec), True, [8], nvec=nvec)
    logp_tf, entropy_tf = tf_net.log_prob_entropy(tf.constant(logits), tf.constant(actions))
    np.testing.assert_allclose(logp_tf.numpy(), want_logp, atol=1e-5)
    np.testing.assert_allclose(entropy_tf.numpy(), want_entropy, atol=1e-5)
    assert np.array_equal(tf_net.argmax(tf.constant(logits)).numpy(), sb3.mode().numpy())


def test_the_rollouts_numpy_policy_samples_as_torch_does() -> None:
    """The rollout acts in numpy (train.core.numpy_policy); the update recomputes the log-probs in torch:
    the same actions on the same Gumbel noise, log-probs within 1e-5 (different matmul kernels)."""
    import torch

    from rl2edge.train.core.network_spec import NetworkSpec
    from rl2edge.train.core.numpy_policy import NumpyActorCritic
    from rl2edge.train.torch_backend.nets import ActorCritic

    spec = NetworkSpec(
        type="actor_critic_mlp", obs_dim=3, act_dim=5, discrete=True, action_nvec=(2, 3),
        net_arch=(16, 16), activation="tanh",
    )  # fmt: skip
    assert NetworkSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    torch.manual_seed(0)
    net = ActorCritic.from_network_spec(spec)
    with torch.no_grad():
        for p in net.actor.parameters():  # the orthogonal init's 0.01 gain leaves near ties everywhere
            p.mul_(100.0 if p.dim() == 2 else 1.0)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(32, 3)).astype(np.float32)
    noise = rng.gumbel(size=(32, 5)).astype(np.float32)
    a_t, logp_t, v_t = (x.numpy() for x in net.act(torch.from_numpy(obs), torch.from_numpy(noise)))
    from rl2edge.train.torch_backend.ppo import TorchPPO

    agent = TorchPPO.__new__(TorchPPO)
    agent.policy = net
    numpy_policy = NumpyActorCritic(spec)
    numpy_policy.load(agent.rollout_weights())
    a_n, logp_n, v_n = numpy_policy.act(obs, noise)
    # The two engines' logits differ in the last bits: a sample whose top two perturbed logits lie within
    # 1e-3 of each other in some component may pick either. Compare the decisive ones, most of the batch.
    with torch.no_grad():
        perturbed = net.actor(torch.from_numpy(obs)).numpy() + noise
    gaps = [np.diff(np.sort(perturbed[:, a:b], axis=-1)[:, -2:], axis=-1)[:, 0] for a, b in ((0, 2), (2, 5))]
    decisive = np.min(gaps, axis=0) > 1e-3
    assert decisive.sum() >= 24, decisive.sum()
    assert a_n.shape == (32, 2) and np.array_equal(a_n[decisive], a_t[decisive])
    np.testing.assert_allclose(logp_n[decisive], logp_t[decisive], atol=1e-5)
    np.testing.assert_allclose(v_n, v_t, atol=1e-5)
    assert np.array_equal(net.deterministic(torch.from_numpy(obs)).numpy().shape, (32, 2))


@pytest.mark.parametrize(
    ("algo", "says"),
    [
        ("sac", "SAC needs a Box action space and testkit.matrix_plants:ThreeValves has a MultiDiscrete/MultiBinary one; use ppo, a2c, ppo_lstm or a2c_lstm"),
        ("dqn", "DQN needs a Discrete action space and testkit.matrix_plants:ThreeValves has a MultiDiscrete/MultiBinary one"),
    ],
)  # fmt: skip
def test_off_policy_algorithms_refuse_a_multi_discrete_plant_in_one_line(
    algo: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rl2edge.cli.app import main

    code = main(["train", "--algo", algo, "--env", VALVES, "--steps", "100", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0], err
    assert not (tmp_path / "run").exists()


def test_a_safe_action_must_be_one_index_per_component(tmp_path: Path) -> None:
    """The node map's safe_action of a MultiDiscrete policy: each value an index of its component."""
    from rl2edge.plc_bridge.observation_guard import resolve_safe_action

    class _Policy:
        action_spec = ActionSpec.multi([2, 3], [0, 1])

    assert resolve_safe_action(_Policy(), None) == [0.0, 1.0]  # type: ignore[arg-type]
    assert resolve_safe_action(_Policy(), (1.0, 3.0)) == [1.0, 3.0]  # type: ignore[arg-type]
    for bad in ((1.0,), (1.0, 0.0), (2.0, 1.0), (0.5, 2.0)):
        with pytest.raises(
            ConfigError,
            match=r"must be 2 action indices, one per component, each inside \[\[0, 1\], \[1, 3\]\]",
        ):
            resolve_safe_action(_Policy(), bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- end to end (integration)
@pytest.fixture(scope="module")
def _testkit_importable() -> Any:
    """The CLI's processes (train, export, plc-sim, serve) import testkit's plants as a user's own module."""
    import os

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        yield


def _cli(*args: str | Path) -> Any:
    from testkit.cli import rl2edge

    proc = rl2edge(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _random_return(env_id: str, episodes: int) -> float:
    from rl2edge.train.core.envs import make_env

    env, total = make_env(env_id), 0.0
    for ep in range(episodes):
        env.reset(seed=ep)
        env.action_space.seed(ep)
        done = False
        while not done:
            _, r, term, trunc, _ = env.step(env.action_space.sample())
            total += float(r)
            done = term or trunc
    return total / episodes


@pytest.fixture(scope="module", params=["torch", "tf"])
def valves_int8(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, _testkit_importable: Any
) -> tuple[str, Path]:
    """PPO on the three-valve tank (MultiDiscrete([2, 2, 2])), 16k steps, exported int8."""
    fw = request.param
    root = tmp_path_factory.mktemp(f"valves-{fw}")
    _cli("train", "--env", VALVES, "--framework", fw, "--steps", "16384", "--seed", "0", "--out", root / "run",
         "--no-progress")  # fmt: skip
    _cli("export", root / "run", "--quantize", "int8", "--out", root / "art")
    return fw, root / "art"


@pytest.mark.integration  # 2 x ~45 s: train, export, evaluate, serve
def test_ppo_learns_the_valves_and_serves_them_as_evaluate_does(
    valves_int8: tuple[str, Path], tmp_path: Path
) -> None:
    """The int8 artifact's evaluate return is far above a random policy's on the same seeds (random
    about -2300, one valve setting held to the setpoint about -70; the budget gives about -150 to -250),
    and the episodes served to plc-sim over OPC UA (one Double[3] node) return exactly what evaluate does."""
    from testkit.plc import served_returns

    fw, art = valves_int8
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["action"] == {
        "type": "multi_discrete",
        "nvec": [2, 2, 2],
        "start": [0, 0, 0],
        "binary": False,
    }
    got = json.loads(_cli("evaluate", art, "--episodes", "5", "--seed", "0", "--json").stdout)
    random = _random_return(VALVES, 5)
    assert random < -1500 and got["mean_return"] > -600, (fw, got["mean_return"], random)
    served = served_returns(art, VALVES, 2, 0, tmp_path)
    assert served == got["returns"][:2]


@pytest.mark.integration
def test_faults_write_the_per_component_safe_action_to_the_plc(
    valves_int8: tuple[str, Path], tmp_path: Path
) -> None:
    """serve misses deadlines (--inject-faults) and plc-sim publishes NaN (--invalid-rate): every such cycle
    in the PLC's trace carries the map's safe action [1, 0, 1] (an integer action never holds: a held index
    may be a wrong one), with the fault's status; healthy cycles write the policy's indices."""
    from rl2edge.plc_bridge.nodemap import default_node_map
    from testkit.plc import NO_MISS, free_port, running, stop, wait_for_server

    fw, art = valves_int8
    if fw != "torch":
        pytest.skip("the response is the bridge's, not the backend's: one backend's artifact shows it")
    m = default_node_map()
    node_map = {
        "observation": m.observation[0], "observation_seq": m.observation_seq, "action": m.action[0],
        "action_seq": m.action_seq, "heartbeat": m.heartbeat, "status": m.status, "safe_action": [1, 0, 1],
    }  # fmt: skip
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(node_map))
    url, trace, summary = (
        f"opc.tcp://127.0.0.1:{free_port()}",
        tmp_path / "trace.jsonl",
        tmp_path / "serve.json",
    )
    sim = ["plc-sim", "--env", VALVES, "--endpoint", url, "--seed", "0", "--episodes", "2", "--trace", str(trace),
           "--invalid-rate", "0.1"]  # fmt: skip
    with running(sim, tmp_path / "sim.log") as proc_sim:
        wait_for_server(url)
        serve = ["serve", str(art), "--endpoint", url, "--period-ms", "5", *NO_MISS, "--map", str(tmp_path / "map.yaml"),
                 "--inject-faults", "deadline_miss:0.1", "--fault-seed", "3", "--summary", str(summary)]  # fmt: skip
        with running(serve, tmp_path / "serve.log") as proc:
            assert proc_sim.wait(timeout=180) == 0, (tmp_path / "sim.log").read_text()
            assert stop(proc) == 0, (tmp_path / "serve.log").read_text()
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    by_status: dict[int, list[list[float]]] = {}
    for r in rows:
        by_status.setdefault(r["status"], []).append(r["action"])
    assert set(by_status) <= {0, 1, 3}, sorted(by_status)
    for status in (1, 3):  # invalid observation, deadline miss
        assert len(by_status.get(status, [])) >= 5, (status, len(rows))
        assert all(a == [1.0, 0.0, 1.0] for a in by_status[status]), by_status[status][:5]
    healthy = np.array(by_status[0])
    assert set(np.unique(healthy)) <= {0.0, 1.0} and len({tuple(a) for a in healthy}) > 1


@pytest.mark.integration
@pytest.mark.parametrize(("env_id", "node_type"), [(PUMP, "Int16"), (BINARY, "Boolean")])
def test_one_typed_scalar_node_per_component_on_another_opcua_stack(
    env_id: str, node_type: str, tmp_path: Path, _testkit_importable: Any
) -> None:
    """A data block with one node per component, as a PLC declares valves and a selector switch: Int16s
    for MultiDiscrete([2, 3], start=[0, 1]) and Booleans for MultiBinary(3), on node-opcua (not asyncua).
    A short torch A2C run is enough: what is checked is that each component reaches its own typed node and
    the plant, so that the served returns equal evaluate's."""
    from testkit.plc import NO_MISS, running, stop
    from testkit.standin_plc import StandinPlc

    _cli(
        "train",
        "--algo",
        "a2c",
        "--env",
        env_id,
        "--steps",
        "2048",
        "--out",
        tmp_path / "run",
        "--no-progress",
    )
    _cli("export", tmp_path / "run", "--quantize", "int8", "--out", tmp_path / "art")
    evaluated = json.loads(
        _cli("evaluate", tmp_path / "art", "--episodes", "2", "--seed", "0", "--json").stdout
    )
    with StandinPlc(
        env_id, seed=0, episodes=2, layout="scalar", types={"Act": node_type}, workdir=tmp_path / "plc"
    ) as plc:
        node_map = plc.node_map(nsu=True)
        assert len(node_map["action"]) == (2 if env_id == PUMP else 3)
        (tmp_path / "map.yaml").write_text(yaml.safe_dump(node_map, sort_keys=False))
        serve = ["serve", str(tmp_path / "art"), "--endpoint", plc.endpoint, "--period-ms", "5", *NO_MISS,
                 "--map", str(tmp_path / "map.yaml")]  # fmt: skip
        with running(serve, tmp_path / "serve.log") as proc:
            returns = plc.wait_episodes(120)
            assert stop(proc) == 0, (tmp_path / "serve.log").read_text()
    assert returns == evaluated["returns"]
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
