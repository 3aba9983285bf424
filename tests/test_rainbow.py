"""Rainbow's components, each against a small numpy reference: the sum tree, prioritized sampling and its
importance weights, n-step returns across termination and truncation, the C51 projection, dueling
aggregation, noisy layers (noisy in training, their mean at export); then the whole: every TF function
traces once with every component on, memory stays flat, and with every component off it is DQN."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from rl2edge.train.algos import build_config, train
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.nstep import NStepCollector
from rl2edge.train.core.replay import PrioritizedReplayBuffer
from rl2edge.train.core.sum_tree import SumTree

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

SPEC = NetworkSpec.from_json(
    {
        "type": "rainbow_mlp",
        "obs_dim": 4,
        "act_dim": 3,
        "net_arch": [32, 32],
        "activation": "relu",
        "dueling": True,
        "noisy": True,
        "noisy_sigma0": 0.5,
        "distributional": True,
        "n_atoms": 11,
        "v_min": -5.0,
        "v_max": 5.0,
    }
)


# ------------------------------------------------------------------------------------------ sum tree
def test_sum_tree_finds_and_samples_in_proportion_to_priorities() -> None:
    rng = np.random.default_rng(0)
    tree = SumTree(37)  # not a power of two: 64 leaves, 27 of them never used
    p = rng.random(37) * 5
    tree.update(np.arange(37), p)
    assert tree.total == pytest.approx(p.sum(), rel=1e-12)
    # the leaf holding each mass is the reference's prefix-sum search
    mass = np.linspace(0, p.sum(), 5000, endpoint=False)
    np.testing.assert_array_equal(tree.find(mass), np.searchsorted(np.cumsum(p), mass, side="right"))
    # updates, a repeated index among them (the last value wins, as numpy assignment), and zeros
    tree.update(np.array([3, 10, 3, 36]), np.array([9.0, 0.0, 0.25, 7.0]))
    p[[10, 3, 36]] = [0.0, 0.25, 7.0]
    assert tree.total == pytest.approx(p.sum(), rel=1e-12)
    np.testing.assert_allclose(tree[np.arange(37)], p)
    draws = tree.find(rng.random(400_000) * tree.total)
    freq = np.bincount(draws, minlength=37) / draws.size
    assert freq[10] == 0.0  # a zero priority is never drawn
    # binomial standard error at 400k draws is <= 0.0008; 4 sigma
    np.testing.assert_allclose(freq, p / p.sum(), atol=0.0032)
    with pytest.raises(ValueError, match="non-negative"):
        tree.update(np.array([0]), np.array([-1.0]))


def test_prioritized_replay_weights_beta_and_priority_updates() -> None:
    alpha, eps = 0.6, 1e-3
    buf = PrioritizedReplayBuffer(8, (2,), True, 1, alpha=alpha, eps=eps)
    obs = np.arange(12, dtype=np.float32).reshape(6, 2)
    buf.add(
        obs,
        np.zeros(6, np.int64),
        np.zeros(6, np.float32),
        obs,
        np.zeros(6, np.float32),
        np.ones(6, np.float32),
    )
    np.testing.assert_allclose(buf.tree[np.arange(6)], 1.0)  # new transitions: the max priority so far (1)
    td = np.array([0.5, -2.0, 0.0, 4.0, 1.0, -0.1])
    buf.update_priorities(np.arange(6), td)
    expect = (np.abs(td) + eps) ** alpha
    np.testing.assert_allclose(buf.tree[np.arange(6)], expect)
    buf.add(
        obs[:1],
        np.zeros(1, np.int64),
        np.zeros(1, np.float32),
        obs[:1],
        np.zeros(1, np.float32),
        np.ones(1, np.float32),
    )
    assert buf.tree[np.array([6])][0] == pytest.approx((4.0 + eps) ** alpha)  # max |td| + eps seen so far
    expect = np.append(expect, (4.0 + eps) ** alpha)
    rng = np.random.default_rng(0)
    for beta in (0.4, 1.0):
        batch = buf.sample(2, 5, rng, lambda x: x, beta)
        probs = expect[batch.indices] / expect.sum()
        w = (7 * probs) ** -beta
        np.testing.assert_allclose(batch.weights, w / w.max(axis=1, keepdims=True), rtol=1e-6)
        np.testing.assert_array_equal(batch.obs, buf.obs[batch.indices])
    cfg = build_config("CartPole-v1", overrides={"n_timesteps": 1000, "per_beta": 0.4}, algo="rainbow")
    assert [cfg.beta(s) for s in (0, 500, 1000, 5000)] == pytest.approx([0.4, 0.7, 1.0, 1.0])


# -------------------------------------------------------------------------------------------- n-step
def _reference_nstep(rewards, terminated, truncated, n, gamma):
    """Per start t of one env's stream: (k, R, terminated) by the definition, one step at a time."""
    out = []
    for t in range(len(rewards)):
        ret, k = 0.0, 0
        while True:
            ret += gamma**k * rewards[t + k]
            k += 1
            if terminated[t + k - 1] or truncated[t + k - 1]:
                out.append((t, k, ret, bool(terminated[t + k - 1])))
                break
            if k == n:
                out.append((t, k, ret, False))
                break
            if t + k >= len(rewards):
                break  # the stream ends mid-sum: not emitted yet
    return out


def test_n_step_returns_cut_at_termination_and_bootstrap_at_truncation() -> None:
    n, gamma = 3, 0.9
    rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    terminated = np.zeros(10, bool)
    truncated = np.zeros(10, bool)
    terminated[3] = True  # an episode of 4 steps, ended by its task
    truncated[5] = True  # then one of 2 steps, cut by a time limit
    col = NStepCollector(n, gamma, n_envs=1)
    got = []
    for t in range(10):
        obs = np.array([[float(t)]], np.float32)
        nxt = np.array([[float(t) + 0.5]], np.float32)  # the step's true successor (final obs at an end)
        ready = col.add(
            obs, np.array([t]), rewards[t : t + 1], nxt, terminated[t : t + 1], truncated[t : t + 1]
        )
        if ready is not None:
            for i in range(len(ready)):
                start = int(ready.obs[i, 0])
                got.append((start, ready, i))
    ref = _reference_nstep(rewards, terminated, truncated, n, gamma)
    assert [g[0] for g in got] == [r[0] for r in ref]
    for (start, ready, i), (_, k, ret, term) in zip(got, ref, strict=True):
        assert ready.rewards[i] == pytest.approx(ret, rel=1e-6)
        assert ready.discounts[i] == pytest.approx(gamma**k, rel=1e-6)
        assert bool(ready.terminated[i]) is term
        assert ready.next_obs[i, 0] == start + k - 1 + 0.5  # the observation after its k-th step
    by_start = {r[0]: r for r in ref}
    assert by_start[2][1:] == (2, pytest.approx(3 + 0.9 * 4), True)  # cut by the termination: no bootstrap
    assert by_start[4][1:] == (2, pytest.approx(5 + 0.9 * 6), False)  # truncated: bootstraps with gamma^2
    assert by_start[6][1] == 3


# --------------------------------------------------------------------------------- C51 projection
def _reference_projection(probs, rewards, discounts, support):
    """Bellemare et al. 2017, Algorithm 1, one sample and one atom at a time."""
    n = len(support)
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (n - 1)
    out = np.zeros_like(probs, dtype=np.float64)
    for i in range(len(probs)):
        for j in range(n):
            tz = min(max(rewards[i] + discounts[i] * support[j], v_min), v_max)
            b = (tz - v_min) / dz
            lo, hi = int(np.floor(b)), int(np.ceil(b))
            if lo == hi:
                out[i, lo] += probs[i, j]
            else:
                out[i, lo] += probs[i, j] * (hi - b)
                out[i, hi] += probs[i, j] * (b - lo)
    return out


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_c51_projection_matches_the_reference_and_conserves_mass(framework: str) -> None:
    rng = np.random.default_rng(0)
    support = np.linspace(-5.0, 5.0, 11).astype(np.float32)
    probs = rng.dirichlet(np.ones(11), size=8).astype(np.float32)
    # in range; past v_max and below v_min (clipped onto the ends); terminal (discount 0); on an atom exactly
    rewards = np.array([0.3, 20.0, -20.0, 1.5, 0.0, -0.7, 2.0, 4.9], np.float32)
    discounts = np.array([0.9, 0.99, 0.81, 0.0, 1.0, 0.5, 0.0, 0.729], np.float32)
    ref = _reference_projection(probs.astype(np.float64), rewards, discounts, support.astype(np.float64))
    if framework == "torch":
        from rl2edge.train.torch_backend.nets import project_distribution

        got = project_distribution(
            *(torch.as_tensor(a) for a in (probs, rewards, discounts, support))
        ).numpy()
    else:
        from rl2edge.train.tf_backend.nets import project_distribution

        got = project_distribution(*(tf.constant(a) for a in (probs, rewards, discounts, support))).numpy()
    # float32 arithmetic against a float64 reference: ~1e-7 per atom
    np.testing.assert_allclose(got, ref, atol=2e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=2e-6)
    assert got[1, -1] == pytest.approx(1.0, abs=1e-6) and got[2, 0] == pytest.approx(1.0, abs=1e-6)
    assert got[4] == pytest.approx(probs[4], abs=1e-6)  # r 0, discount 1: every atom onto itself


# ------------------------------------------------------------------------------- network structure
def _torch_net(**spec_overrides):
    from rl2edge.train.torch_backend.nets import RainbowQNetwork

    torch.manual_seed(0)
    return RainbowQNetwork(SPEC.replace(**spec_overrides))


def _tf_net(**spec_overrides):
    from rl2edge.train.tf_backend.nets import RainbowNets

    return RainbowNets(SPEC.replace(**spec_overrides), seed=0).q_net


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_dueling_aggregates_value_and_centred_advantages(framework: str) -> None:
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    if framework == "torch":
        net = _torch_net()
        with torch.no_grad():
            h = net.trunk(torch.as_tensor(obs))
            adv = net.advantage(h).view(5, 3, 11).numpy()
            value = net.value(h).view(5, 1, 11).numpy()
            logits = net.logits(torch.as_tensor(obs)).numpy()
            q = net(torch.as_tensor(obs)).numpy()
        support = net.support.numpy()
    else:
        net = _tf_net()
        h = net.trunk(obs)
        adv = tf.reshape(net._stream(net.advantage, h, None), [5, 3, 11]).numpy()
        value = tf.reshape(net._stream(net.value, h, None), [5, 1, 11]).numpy()
        logits, q = net.logits(obs).numpy(), net(obs).numpy()
        support = net.support.numpy()
    np.testing.assert_allclose(logits, value + adv - adv.mean(1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose((logits - value).mean(1), 0.0, atol=1e-6)  # identifiable: A averages to 0
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(q, (p * support).sum(-1), atol=1e-5)  # the expected Q over the atoms


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_noisy_layers_resample_in_training_and_are_deterministic_otherwise(framework: str) -> None:
    from rl2edge.train.algos import get

    cfg = build_config("CartPole-v1", overrides={"net_arch": [32, 32], "n_atoms": 11}, algo="rainbow")
    spec = SPEC.replace(act_dim=2)
    agent = get("rainbow").agent_class(framework)(spec, cfg, 0, "cpu")
    obs = np.random.default_rng(2).normal(size=(256, 4)).astype(np.float32)
    greedy = agent.deterministic(obs)
    np.testing.assert_array_equal(agent.deterministic(obs), greedy)  # the mean weights: repeatable
    explored = [agent.explore(obs) for _ in range(4)]
    # fresh noise per call: the noisy greedy actions differ from call to call and from the mean's
    assert any((e != explored[0]).any() for e in explored[1:])
    assert any((e != greedy).any() for e in explored)
    # noisy off: explore is the mean's greedy action
    cfg_off = build_config(
        "CartPole-v1", overrides={"net_arch": [32, 32], "n_atoms": 11, "noisy": False}, algo="rainbow"
    )
    agent_off = get("rainbow").agent_class(framework)(spec.replace(noisy=False), cfg_off, 0, "cpu")
    np.testing.assert_array_equal(agent_off.explore(obs), agent_off.deterministic(obs))


def _mean_weight_q(state: dict[str, np.ndarray], obs: np.ndarray, spec: NetworkSpec) -> np.ndarray:
    """The exported network recomputed in numpy from the checkpoint's mu weights (sigma ignored)."""

    def lin(x, prefix):
        w = state.get(f"{prefix}.weight_mu", state.get(f"{prefix}.weight"))
        b = state.get(f"{prefix}.bias_mu", state.get(f"{prefix}.bias"))
        return x @ w.T + b

    h = np.maximum(lin(obs, "q_net.trunk.0"), 0)
    stream = lambda name: lin(np.maximum(lin(h, f"q_net.{name}.hidden"), 0), f"q_net.{name}.out")  # noqa: E731
    a = stream("advantage").reshape(len(obs), spec.act_dim, spec.n_atoms)
    logits = stream("value").reshape(len(obs), 1, spec.n_atoms) + a - a.mean(1, keepdims=True)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p * np.linspace(spec.v_min, spec.v_max, spec.n_atoms)).sum(-1)


def test_export_freezes_the_mean_weights_and_says_so(tmp_path: Path) -> None:
    """A torch run whose noisy layers' sigma is made large: the exported fp32 file is the mean-weight
    network (its Q-values recomputed in numpy from mu alone), and the manifest says so."""
    from safetensors.numpy import load_file, save_file

    from rl2edge.export.pipeline import ExportOptions, export_path
    from rl2edge.fileio import sha256_file
    from rl2edge.runtime import Policy
    from testkit.runs import tiny_train

    run = tiny_train(
        "CartPole-v1", tmp_path / "run", 1500, algo="rainbow", learning_starts=500, net_arch=[64, 64]
    )
    state = load_file(str(run / "policy.safetensors"))
    state = {k: (v * 50 if "sigma" in k else v) for k, v in state.items()}  # noise that would flip actions
    save_file(state, str(run / "policy.safetensors"))
    ckpt = json.loads((run / "checkpoint.json").read_text())
    ckpt["weights"]["sha256"] = sha256_file(run / "policy.safetensors")  # a deliberate edit, re-signed
    (run / "checkpoint.json").write_text(json.dumps(ckpt))
    assert ckpt["network"]["noisy"] is True
    export_path(run, tmp_path / "art", ExportOptions(quantize="fp32", eval_episodes=2, progress=False))
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert "mean weights" in manifest["source"]["noisy_layers"]
    spec = NetworkSpec.from_json(ckpt["network"])
    norm = ckpt["normalization"]
    obs = np.random.default_rng(3).normal(size=(200, 4)).astype(np.float32) * [1.0, 1.0, 0.1, 1.0]
    mean, var = np.asarray(norm["mean"], np.float32), np.asarray(norm["var"], np.float32)
    x = np.clip((obs - mean) / np.sqrt(var + np.float32(norm.get("epsilon", 1e-8))), -10, 10)
    q = _mean_weight_q(state, x, spec)
    top2 = np.sort(q, axis=-1)
    clear = (top2[:, -1] - top2[:, -2]) > 1e-3  # near ties may go either way in any float graph
    policy = Policy.load(tmp_path / "art")
    actions = np.array([policy.predict(o) for o in obs])
    assert clear.sum() > 150
    np.testing.assert_array_equal(actions[clear], q.argmax(-1)[clear])


# ------------------------------------------------------------------------------------- the whole
@pytest.mark.integration  # 25 s: the integration tier, which CI runs too (make test stays under 15 min)
def test_tf_rainbow_traces_once_with_every_component_on_and_memory_stays_flat(tmp_path: Path) -> None:
    import psutil

    overrides = {"n_timesteps": 1000, "learning_starts": 200, "eval_freq": 500, "eval_episodes": 1}
    cfg = build_config("CartPole-v1", overrides=overrides, algo="rainbow")
    assert (
        cfg.dueling
        and cfg.prioritized
        and cfg.distributional
        and cfg.noisy
        and cfg.double_q
        and cfg.n_step == 3
    )
    agents: list = []
    proc = psutil.Process(os.getpid())
    train("tf", "CartPole-v1", cfg, 0, tmp_path / "a", device="cpu", progress=False, agent_out=agents)
    rss_short = proc.memory_info().rss
    cfg_long = build_config("CartPole-v1", overrides={**overrides, "n_timesteps": 2000}, algo="rainbow")
    train("tf", "CartPole-v1", cfg_long, 0, tmp_path / "b", device="cpu", progress=False, agent_out=agents)
    for agent in agents:
        assert agent.trace_counts() == {"deterministic": 1, "explore": 1, "train_step": 1, "update_target": 1}
    grown_mb = (proc.memory_info().rss - rss_short) / 2**20
    # 1000 more env steps in a second run of the same shapes: a retrace per gradient step would add tens of MB
    assert grown_mb < 40, f"RSS grew {grown_mb:.1f} MB"


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_rainbow_with_every_component_off_trains_dqn(framework: str, tmp_path: Path) -> None:
    """Same seed, DQN's CartPole preset: Rainbow with double Q, dueling, PER, n-step, C51 and noise all
    off learns the same weights as DQN after 3000 steps (about 900 gradient steps). The two losses are the
    same ops (a mean of per-sample Huber terms; Rainbow's multiplied by importance weights of exactly 1)
    in the same process, so nothing separates the runs but a code path; compared within 1e-5 all the same,
    not bit for bit."""
    dqn_cfg = build_config(
        "CartPole-v1", overrides={"n_timesteps": 3000, "eval_freq": 0, "double_q": False}, algo="dqn"
    )
    off = {"dueling": False, "prioritized": False, "n_step": 1, "distributional": False, "noisy": False}
    rb_cfg = build_config("CartPole-v1", overrides={**dqn_cfg.to_json(), **off}, algo="rainbow")
    agents: list = []
    for algo, cfg in (("dqn", dqn_cfg), ("rainbow", rb_cfg)):
        (tmp_path / algo).mkdir()
        train(
            framework, "CartPole-v1", cfg, 0, tmp_path / algo, device="cpu", progress=False, agent_out=agents
        )
    dqn, rainbow = (a.variables("q") for a in agents)
    assert [w.shape for w in dqn] == [w.shape for w in rainbow]
    for a, b in zip(dqn, rainbow, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    from rl2edge.train.algos import get
    from rl2edge.train.core.envs import make_env
    from rl2edge.train.core.offpolicy_driver import network_spec
    from rl2edge.train.core.spaces import action_spec, observation_spec

    env = make_env("CartPole-v1")
    spec = network_spec(
        get("dqn").network, dqn_cfg, observation_spec(env.observation_space), action_spec(env.action_space)
    )
    initial = get("dqn").agent_class(framework)(spec, dqn_cfg, 0, "cpu").variables("q")
    assert max(np.abs(a - b).max() for a, b in zip(initial, dqn, strict=True)) > 1e-3  # it did train


def test_rainbow_configs_refuse_mistakes() -> None:
    from rl2edge.errors import ConfigError

    with pytest.raises(ConfigError, match="v_min < v_max"):
        build_config("CartPole-v1", overrides={"v_min": 5, "v_max": 5}, algo="rainbow")
    with pytest.raises(ConfigError, match="n_step must be >= 1"):
        build_config("CartPole-v1", overrides={"n_step": 0}, algo="rainbow")
    with pytest.raises(ConfigError, match="noisy must be true or false"):
        build_config("CartPole-v1", overrides={"noisy": "off"}, algo="rainbow")
    from rl2edge.train.algos import get

    with pytest.raises(ConfigError, match="RAINBOW needs a Discrete action space"):
        get("rainbow").check_action_space("box", "Pendulum-v1")
