"""A2C in both backends: torch/TF parity of loss and gradients over 1, 4 and 8 envs, a gradient whose scale
does not depend on the number of envs, PyTorch's RMSprop in TF, eager/graph parity, one trace per
compiled function, the preset reaching CartPole's 500 (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

from rl2edge.train.algos import build_config, train  # noqa: E402
from rl2edge.train.core.rollout import Minibatch, RolloutBuffer  # noqa: E402
from testkit.agents import make_agent, network  # noqa: E402

N_STEPS = 5


def _net(discrete: bool) -> dict:
    return network(
        "a2c",
        4,
        2 if discrete else 1,
        discrete=discrete,
        net_arch=[64, 64],
        activation="tanh",
        log_std_init=-0.3,
    )


def _agents(discrete: bool, **overrides: object):
    """A torch and a TF A2C agent with the same weights (torch's, copied across)."""
    cfg_overrides = {"ent_coef": 0.01, **overrides}
    t_agent = make_agent("a2c", "torch", _net(discrete), "CartPole-v1", 0, **cfg_overrides)
    f_agent = make_agent("a2c", "tf", _net(discrete), "CartPole-v1", 0, **cfg_overrides)
    f_agent.policy.copy_from_torch(t_agent.policy.state_dict())
    return t_agent, f_agent, t_agent.cfg


def _rollout(n_envs: int, discrete: bool, rng: np.random.Generator, per_env: dict | None = None) -> Minibatch:
    """A finished rollout of n_envs x N_STEPS as the driver makes it, as one minibatch (A2C's update).
    `per_env`: one env's columns, copied to every env (the same data, n_envs times)."""
    buf = RolloutBuffer(N_STEPS, n_envs, (4,), discrete, 1)
    if per_env is None:
        f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
        acts = rng.integers(0, 2, (N_STEPS, n_envs)) if discrete else f(N_STEPS, n_envs, 1)
        cols = dict(obs=f(N_STEPS, n_envs, 4), act=acts, logp=f(N_STEPS, n_envs), val=f(N_STEPS, n_envs))
        cols.update(rew=f(N_STEPS, n_envs), done=(rng.random((N_STEPS, n_envs)) < 0.2), last=f(n_envs))
    else:
        tile = lambda a: np.repeat(a, n_envs, axis=1)  # noqa: E731
        cols = {k: tile(v) for k, v in per_env.items() if k != "last"}
        cols["last"] = np.repeat(per_env["last"], n_envs)
    for t in range(N_STEPS):
        buf.add(
            cols["obs"][t], cols["act"][t], cols["logp"][t], cols["val"][t], cols["rew"][t], cols["done"][t]
        )
    buf.finish(cols["last"], 0.99, 1.0)
    # in rollout order (no permutation): the mean's float sum then runs in the same order in both backends
    n = N_STEPS * n_envs
    flat = lambda a: a.reshape(n, *a.shape[2:])  # noqa: E731
    return Minibatch(
        flat(buf.obs),
        flat(buf.actions),
        flat(buf.logprobs),
        flat(buf.values),
        flat(buf.advantages),
        flat(buf.returns),
    )


def _torch_grads(agent, mb: Minibatch) -> tuple[float, dict[str, np.ndarray]]:
    agent.policy.zero_grad()
    loss, _ = agent.loss(mb, 0.0)
    loss.backward()
    return loss.item(), {k: p.grad.numpy().copy() for k, p in agent.policy.named_parameters()}


def _tf_grads(agent, mb: Minibatch) -> tuple[float, dict[str, np.ndarray]]:
    pairs = agent.policy._pairs()
    with tf.GradientTape() as tape:
        loss, _ = agent.loss_fn(
            mb.obs, mb.actions, mb.old_logprobs, mb.old_values, mb.advantages, mb.returns, tf.constant(0.0)
        )
    grads = tape.gradient(loss, [v for _, v in pairs])
    # Dense kernels are [in, out], torch's Linear weights [out, in]
    return float(loss), {
        name: (g.numpy().T if name.endswith(".weight") else g.numpy())
        for (name, _), g in zip(pairs, grads, strict=True)
    }


@pytest.mark.parametrize("discrete", [True, False])
@pytest.mark.parametrize("n_envs", [1, 4, 8])
def test_torch_and_tf_give_the_same_loss_and_gradients(n_envs: int, discrete: bool) -> None:
    t_agent, f_agent, _ = _agents(discrete)
    mb = _rollout(n_envs, discrete, np.random.default_rng(n_envs))
    loss_t, grads_t = _torch_grads(t_agent, mb)
    loss_f, grads_f = _tf_grads(f_agent, mb)
    # float32 means over 5..40 transitions and matmuls of 64: the two frameworks' kernels sum in
    # different orders, a few 1e-7 relative on O(1) values; 1e-5 absolute is two orders above that.
    assert abs(loss_t - loss_f) < 1e-5
    assert grads_t.keys() == grads_f.keys()
    for name in grads_t:
        np.testing.assert_allclose(grads_f[name], grads_t[name], atol=1e-5, rtol=0, err_msg=name)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_the_gradient_scale_does_not_change_with_the_number_of_envs(framework: str) -> None:
    """The same per-env data in 1 and in 8 envs: the loss is a mean over every transition, so the
    gradient is the same. Summing per-env losses (tf.add_n without dividing by num_envs) would make it 8x."""
    rng = np.random.default_rng(5)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    one_env = dict(
        obs=f(N_STEPS, 1, 4),
        act=rng.integers(0, 2, (N_STEPS, 1)),
        logp=f(N_STEPS, 1),
        val=f(N_STEPS, 1),
        rew=f(N_STEPS, 1),
        done=np.zeros((N_STEPS, 1), bool),
        last=f(1),
    )
    t_agent, f_agent, _ = _agents(True)
    grads = _torch_grads if framework == "torch" else _tf_grads
    agent = t_agent if framework == "torch" else f_agent
    loss_1, g1 = grads(agent, _rollout(1, True, rng, one_env))
    loss_8, g8 = grads(agent, _rollout(8, True, rng, one_env))
    assert abs(loss_1 - loss_8) < 1e-5
    norm_1 = np.sqrt(sum(np.sum(g**2) for g in g1.values()))
    norm_8 = np.sqrt(sum(np.sum(g**2) for g in g8.values()))
    assert norm_1 > 1e-3 and abs(norm_8 / norm_1 - 1.0) < 1e-4, (norm_1, norm_8)


def test_tf_rmsprop_is_pytorchs_rmsprop() -> None:
    """Five steps on the same gradients: the weights and the square averages match torch.optim.RMSprop.
    Keras's RMSprop (eps inside the square root) would not: the first step alone moves a weight with a
    small gradient by a visibly different amount."""
    import keras

    from rl2edge.train.tf_backend.rmsprop import TorchRMSprop

    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(6, 3)).astype(np.float32)
    grads = [rng.normal(size=(6, 3)).astype(np.float32) * 10.0 ** rng.integers(-4, 1) for _ in range(5)]
    pt = torch.nn.Parameter(torch.tensor(w0))
    opt_t = torch.optim.RMSprop([pt], lr=7e-4, alpha=0.99, eps=1e-5)
    tv = tf.Variable(w0)
    opt_f = TorchRMSprop([tv], 7e-4, 0.99, 1e-5)
    kv = tf.Variable(w0)
    opt_k = keras.optimizers.RMSprop(learning_rate=7e-4, rho=0.99, epsilon=1e-5)
    for g in grads:
        pt.grad = torch.tensor(g)
        opt_t.step()
        opt_f.apply_gradients([(tf.constant(g), tv)])
        opt_k.apply_gradients([(tf.constant(g), kv)])
    np.testing.assert_allclose(tv.numpy(), pt.detach().numpy(), atol=1e-6, rtol=0)
    np.testing.assert_allclose(
        opt_f.square_avgs[0].numpy(), opt_t.state[pt]["square_avg"].numpy(), rtol=1e-5, atol=1e-12
    )
    assert np.abs(kv.numpy() - pt.detach().numpy()).max() > 1e-4  # the eps placement is not a detail


@pytest.mark.parametrize("fused", [False, True])
def test_tf_eager_and_graph_updates_agree(fused: bool) -> None:
    rng = np.random.default_rng(1)
    rollouts = [_rollout(4, True, rng) for _ in range(3)]
    states = []
    for eager in (False, True):
        tf.config.run_functions_eagerly(eager)
        try:
            agent = make_agent("a2c", "tf", _net(True), "CartPole-v1", 3, ent_coef=0.01)
            for mb in rollouts:  # one gradient step per rollout, as the driver does
                if fused:
                    agent.train_minibatches([mb], 0.0)
                else:
                    agent.train_step(mb, 0.0)
            states.append(
                [v.numpy() for v in agent.policy.trainable_variables]
                + [v.numpy() for v in agent.optimizer.variables]
            )
        finally:
            tf.config.run_functions_eagerly(False)
    graph, eager_ = states
    assert len(graph) == len(eager_) > 8  # weights, the learning rate and RMSprop's square averages
    # graph mode and XLA may reorder float32 sums (~1e-6 relative); RMSprop's first steps move a weight by
    # about lr (7e-4) whatever the gradient's size, so 3 steps stay far below 1e-5. Not bit for bit.
    for g, e in zip(graph, eager_, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


def test_tf_a2c_traces_once_and_torch_a2c_trains(tmp_path: Path) -> None:
    cfg = build_config(
        "CartPole-v1", overrides={"n_timesteps": 2000, "eval_freq": 1000, "eval_episodes": 2}, algo="a2c"
    )
    agents: list = []
    (tmp_path / "tf").mkdir()
    train("tf", "CartPole-v1", cfg, 0, tmp_path / "tf", device="cpu", progress=False, agent_out=agents)
    counts = agents[0].trace_counts()
    assert counts == {"act": 1, "deterministic": 1, "train_step": 0, "train_many": 1}
    assert int(agents[0].updates.numpy()) == 2000 // (
        8 * N_STEPS
    )  # the preset's 8 envs: one step per rollout
    (tmp_path / "torch").mkdir()
    train("torch", "CartPole-v1", cfg, 0, tmp_path / "torch", device="cpu", progress=False, agent_out=agents)
    import json

    for fw in ("tf", "torch"):
        rows = (tmp_path / fw / "progress.csv").read_text().splitlines()
        header = rows[0].split(",")
        assert {"policy_loss", "value_loss", "entropy"} <= set(header) and "clip_range" not in header
        ckpt = json.loads((tmp_path / fw / "checkpoint.json").read_text())
        assert ckpt["algo"] == "a2c" and ckpt["hyperparameters"]["use_rms_prop"] is True


def test_a2c_config_refuses_ppo_only_hyperparameters() -> None:
    from rl2edge.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown A2C hyperparameter 'clip_range'"):
        build_config("CartPole-v1", overrides={"clip_range": 0.2}, algo="a2c")
    with pytest.raises(ConfigError, match="use_rms_prop must be true or false"):
        build_config("CartPole-v1", overrides={"use_rms_prop": "no"}, algo="a2c")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a2c_cartpole_preset_reaches_500(framework: str, tmp_path: Path) -> None:
    cfg = build_config("CartPole-v1", overrides={"eval_freq": 25_000, "eval_episodes": 10}, algo="a2c")
    result = train(framework, "CartPole-v1", cfg, 0, tmp_path, device="cpu", progress=False)
    assert result.final_eval.mean >= 475, result.final_eval.returns


def test_reward_scaling_is_sb3_vecnormalizes() -> None:
    """The same reward stream through our RewardScaler and through SB3's VecNormalize(norm_reward=True)
    (its own methods, on a real vector env it wraps but does not step): the same scaled rewards."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rl2edge.train.core.normalization import RewardScaler

    n, gamma = 3, 0.99
    sb3 = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")] * n), norm_obs=False, gamma=gamma)
    ours = RewardScaler(n, gamma)
    rng = np.random.default_rng(0)
    for _ in range(300):
        reward = rng.normal(-1.0, 3.0, n)
        dones = rng.random(n) < 0.05
        sb3._update_reward(reward)
        expected = sb3.normalize_reward(reward)
        sb3.returns[dones] = 0.0  # what VecNormalize.step_wait does at an episode's end
        np.testing.assert_allclose(ours(reward, dones), expected, rtol=1e-6)
    assert ours.stats.count == pytest.approx(sb3.ret_rms.count)
