"""Recurrent PPO in TensorFlow held to the same standards as the torch agent and to it: loss and every
gradient equal to torch's on copied weights, eager == graph, one trace over a run with changing sequence
lengths and env counts, flat memory, the numpy rollout's states replayed, and the TF export route's cell.

Tolerances: float32 LSTMs in two frameworks sum their gate products in other orders and use other
sigmoid/tanh kernels; over 64-step sequences, with the state carrying each step's rounding into the next,
loss, stats and gradients agree to 1e-5 absolute (gradients of order 1e-3..1), or 1e-6 relative where
Pendulum's unscaled returns make the value loss ~10^3 (float32's own step there is ~6e-5).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rl2edge.train.algos import build_config, train  # noqa: E402
from rl2edge.train.tf_backend.a2c_lstm import TFRecurrentA2C  # noqa: E402
from rl2edge.train.tf_backend.ppo_lstm import TFRecurrentPPO  # noqa: E402
from rl2edge.train.torch_backend.a2c_lstm import TorchRecurrentA2C  # noqa: E402
from rl2edge.train.torch_backend.ppo_lstm import TorchRecurrentPPO  # noqa: E402
from testkit.recurrent import recurrent_rollouts, recurrent_setup  # noqa: E402
from testkit.runs import export_run, tiny_train  # noqa: E402

pytestmark = pytest.mark.integration

NOVEL = "CartPoleNoVel-v1"
PENDULUM_NOVEL = "PendulumNoVel-v1"


def _pair_and_minibatches(
    env_id: str, n_steps: int = 64, batch: int = 0, algo: str = "ppo_lstm", **overrides: object
):
    """A torch agent, a TF agent with its weights, and the sequence minibatches of two numpy rollouts
    (a2c_lstm: one, the whole rollout, advantages as they are)."""
    cfg, network = recurrent_setup(env_id, 4, n_steps, algo, **overrides)
    torch_cls, tf_cls = (
        (TorchRecurrentPPO, TFRecurrentPPO) if algo == "ppo_lstm" else (TorchRecurrentA2C, TFRecurrentA2C)
    )
    torch_agent = torch_cls(network, cfg, 0, "cpu")
    tf_agent = tf_cls(network, cfg, 0, "cpu")
    tf_agent.policy.copy_from_torch(torch_agent.policy.state_dict())
    buffer, _ = recurrent_rollouts(env_id, cfg, network, torch_agent.rollout_weights())
    size = batch or (2 * n_steps if algo == "ppo_lstm" else 4 * n_steps)
    mbs = list(buffer.minibatches(size, np.random.default_rng(0), cfg.normalize_advantage))
    return torch_agent, tf_agent, mbs


def _torch_grads(
    agent: TorchRecurrentPPO, mb, clip: float
) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    loss, stats = agent.loss(mb, clip)
    agent.optimizer.zero_grad()
    loss.backward()
    return (
        float(loss.detach()),
        stats.numpy(),
        {n: p.grad.numpy().copy() for n, p in agent.policy.named_parameters()},
    )


def _tf_grads(agent: TFRecurrentPPO, mb, clip: float) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    p = agent.policy
    with tf.GradientTape() as tape:
        loss, stats = agent.loss(mb, clip)
    variables = p.trainable_variables
    grads = dict(zip([id(v) for v in variables], tape.gradient(loss, variables), strict=True))
    g = lambda v: grads[id(v)].numpy()  # noqa: E731
    out: dict[str, np.ndarray] = {}
    for prefix, lstm in (("lstm_actor", p.lstm_actor), ("lstm_critic", p.lstm_critic)):
        if lstm is None:
            continue
        for k, (k_ih, k_hh, b_ih, b_hh) in enumerate(lstm.cells):
            out[f"{prefix}.weight_ih_l{k}"] = g(k_ih).T
            out[f"{prefix}.weight_hh_l{k}"] = g(k_hh).T
            out[f"{prefix}.bias_ih_l{k}"], out[f"{prefix}.bias_hh_l{k}"] = g(b_ih), g(b_hh)
    if p.critic_linear is not None:
        dense = p.critic_linear.layers[-1]
        out["critic_linear.weight"], out["critic_linear.bias"] = g(dense.kernel).T, g(dense.bias)
    for name, var in p.heads._pairs():
        value = g(var)
        out[f"heads.{name}"] = value.T if value.ndim == 2 else value
    return float(loss), stats.numpy(), out


@pytest.mark.parametrize(
    "env_id, overrides",
    [(NOVEL, {}), (PENDULUM_NOVEL, {}), (NOVEL, {"shared_lstm": True, "enable_critic_lstm": False}),
     (NOVEL, {"enable_critic_lstm": False, "n_lstm_layers": 2}), (NOVEL, {"rnn_type": "gru"}),
     (PENDULUM_NOVEL, {"rnn_type": "gru", "n_lstm_layers": 2})],
    ids=["discrete", "box", "shared-lstm", "linear-critic-2-layers", "gru", "gru-box-2-layers"],
)  # fmt: skip
def test_torch_and_tf_give_the_same_loss_and_gradients(env_id: str, overrides: dict) -> None:
    n_steps = 128 if env_id == PENDULUM_NOVEL else 64  # a Pendulum episode (200 steps) starts inside
    torch_agent, tf_agent, mbs = _pair_and_minibatches(env_id, n_steps, **overrides)
    for mb in mbs:
        assert mb.starts[1:].any()
        t_loss, t_stats, t_grads = _torch_grads(torch_agent, mb, 0.2)
        f_loss, f_stats, f_grads = _tf_grads(tf_agent, mb, 0.2)
        # Pendulum's unscaled returns make value losses of ~10^3: there float32 holds ~1e-4 absolute
        np.testing.assert_allclose(f_loss, t_loss, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(f_stats, t_stats, rtol=1e-6, atol=1e-5)
        assert set(t_grads) == set(f_grads), set(t_grads) ^ set(f_grads)
        for name, grad in t_grads.items():
            np.testing.assert_allclose(f_grads[name], grad, rtol=1e-5, atol=1e-5, err_msg=name)
        assert np.abs(t_grads["lstm_actor.weight_hh_l0"]).max() > 1e-6  # the recurrence is trained


def _flat_weights(w) -> list[np.ndarray]:
    """A RecurrentWeights (the numpy rollout's view of either backend's agent) as a list of arrays."""
    if w is None:
        return []
    if isinstance(w, np.ndarray):
        return [w]
    if isinstance(w, (list, tuple)):
        return [a for item in w for a in _flat_weights(item)]
    return [a for f in dataclasses.fields(w) for a in _flat_weights(getattr(w, f.name))]


@pytest.mark.parametrize(
    "env_id, rnn", [(NOVEL, "lstm"), (PENDULUM_NOVEL, "lstm"), (NOVEL, "gru")], ids=["discrete", "box", "gru"]
)
def test_a2c_lstm_torch_and_tf_give_the_same_loss_gradients_and_rmsprop_step(env_id: str, rnn: str) -> None:
    """a2c_lstm: one minibatch, the whole rollout (4 envs' sequences), A2C's loss and RMSprop in both
    backends: loss, stats and gradients as ppo_lstm's test, then the weights after one update."""
    n_steps = 128 if env_id == PENDULUM_NOVEL else 32
    torch_agent, tf_agent, mbs = _pair_and_minibatches(env_id, n_steps, algo="a2c_lstm", rnn_type=rnn)
    assert len(mbs) == 1 and mbs[0].obs.shape[:2] == (n_steps, 4) and mbs[0].starts[1:].any()
    t_loss, t_stats, t_grads = _torch_grads(torch_agent, mbs[0], 0.0)
    f_loss, f_stats, f_grads = _tf_grads(tf_agent, mbs[0], 0.0)
    assert t_stats.shape == (3,)  # policy loss, value loss, entropy: no ratio, no clip
    np.testing.assert_allclose(f_loss, t_loss, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(f_stats, t_stats, rtol=1e-6, atol=1e-5)
    for name, grad in t_grads.items():
        np.testing.assert_allclose(f_grads[name], grad, rtol=1e-5, atol=1e-5, err_msg=name)
    assert type(torch_agent.optimizer).__name__ == "RMSprop"
    before = _flat_weights(torch_agent.rollout_weights())  # the TF agent's too: copied from it
    params = {n: p.detach().numpy().copy() for n, p in torch_agent.policy.named_parameters()}
    torch_agent.train_minibatches(mbs, 0.0)
    tf_agent.train_minibatches(mbs, 0.0)
    after_torch, after_tf = (
        _flat_weights(torch_agent.rollout_weights()),
        _flat_weights(tf_agent.rollout_weights()),
    )
    # RMSprop's first step is lr * g / (sqrt(1 - alpha) |g| + eps): 10 lr for every gradient well above eps
    # (Adam's would be lr), and as steep as lr / eps in g where g is near 0. Gradients agree to 1e-5, so the
    # steps agree to (lr / eps) * 1e-5 = lr.
    lr = torch_agent.cfg.learning_rate(1.0)
    steps_torch = [a - b for a, b in zip(after_torch, before, strict=True)]
    steps_tf = [a - b for a, b in zip(after_tf, before, strict=True)]
    largest = max(  # torch's own parameters, each weight by itself
        float(np.abs(p.detach().numpy() - params[name]).max())
        for name, p in torch_agent.policy.named_parameters()
    )
    assert abs(largest - 10 * lr) < 0.01 * lr, (largest, lr)
    for a, b in zip(steps_torch, steps_tf, strict=True):
        np.testing.assert_allclose(b, a, atol=lr)


@pytest.mark.parametrize("batch", [128, 16], ids=["whole-sequences", "chunks"])
def test_tf_replays_the_states_the_numpy_rollout_acted_with(batch: int) -> None:
    _, tf_agent, mbs = _pair_and_minibatches(NOVEL, 64, batch)
    assert mbs[0].obs.shape[:2] == ((64, 2) if batch == 128 else (16, 1))
    for mb in mbs:
        logp, _, values = tf_agent.policy.evaluate_sequences(
            tf.constant(mb.obs),
            tf.constant(mb.actions),
            tf.constant(mb.starts),
            mb.actor_state,
            mb.critic_state,
        )
        np.testing.assert_allclose(logp.numpy(), mb.old_logprobs.reshape(-1), atol=1e-5)
        np.testing.assert_allclose(values.numpy(), mb.old_values.reshape(-1), atol=1e-5)


def _loss_args(tf_agent: TFRecurrentPPO, mb, clip: float) -> list:
    """The loss function's arguments for one minibatch: its columns, the actor's and the critic's state
    tuples, the clip."""
    fields = ("obs", "actions", "old_logprobs", "old_values", "advantages", "returns", "starts")
    pi, vf = (tuple(tf.constant(p) for p in s) for s in tf_agent._states(mb))
    return [*(tf.constant(getattr(mb, f)) for f in fields), pi, vf, tf.constant(np.float32(clip))]


@pytest.mark.parametrize("rnn", ["lstm", "gru"])
def test_eager_and_graph_give_the_same_loss(rnn: str) -> None:
    _, tf_agent, mbs = _pair_and_minibatches(NOVEL, rnn_type=rnn)
    eager_loss, eager_stats = tf_agent.loss(mbs[0], 0.2)
    graph_loss, graph_stats = tf.function(tf_agent.loss_fn)(*_loss_args(tf_agent, mbs[0], 0.2))
    assert abs(float(eager_loss) - float(graph_loss)) < 1e-6
    np.testing.assert_allclose(eager_stats.numpy(), graph_stats.numpy(), atol=1e-6)


@pytest.mark.parametrize("rnn", ["lstm", "gru"])
def test_one_trace_over_runs_of_other_shapes_and_flat_memory(rnn: str, tmp_path: Path) -> None:
    import psutil

    agents: list = []
    cfg = build_config(
        NOVEL, overrides={"n_timesteps": 4096, "eval_freq": 0, "rnn_type": rnn}, algo="ppo_lstm"
    )
    train("tf", NOVEL, cfg, 0, tmp_path / "a", device="cpu", progress=False, agent_out=agents)
    agent = agents[0]
    assert agent.trace_counts() == {"train_many": 1}
    # other sequence lengths, env counts and minibatch counts: still the one trace
    _, _, mbs = _pair_and_minibatches(NOVEL, 48, rnn_type=rnn)
    proc = psutil.Process(os.getpid())
    for i in range(20):
        agent.train_minibatches(mbs[: 1 + i % 2], 0.1 + 0.01 * i)
    before = proc.memory_info().rss
    for i in range(300):  # 300 calls x up to 2 minibatches x 48 steps x 4 envs: 57,600 steps replayed
        agent.train_minibatches(mbs[: 1 + i % 2], 0.1 + 0.001 * i)
    grown_mb = (proc.memory_info().rss - before) / 2**20
    assert agent.trace_counts() == {"train_many": 1}
    assert grown_mb < 20, f"RSS grew {grown_mb:.1f} MB"


def test_tf_route_exports_the_same_state_contract_as_torch(tmp_path: Path) -> None:
    """A TF checkpoint's artifact: the torch route's state names, verified over whole episodes."""
    tf_run = tiny_train(NOVEL, tmp_path / "tf", steps=4096, algo="ppo_lstm", framework="tf")
    torch_run = tiny_train(NOVEL, tmp_path / "torch", steps=2048, algo="ppo_lstm")
    export_run(tf_run, tmp_path / "tf-art", "all")
    export_run(torch_run, tmp_path / "torch-art", "fp32")
    tf_m = json.loads((tmp_path / "tf-art" / "int8" / "manifest.json").read_text())
    torch_m = json.loads((tmp_path / "torch-art" / "manifest.json").read_text())
    assert tf_m["state"] == torch_m["state"]
    assert tf_m["source"]["framework"] == "tf" and tf_m["onnx"] is None
    assert "whole episodes" in tf_m["quantization"]["calibration"]["sequences"]
    # the exported file against the TF graph it came from, step by step with the state carried
    from rl2edge.export.calibration import collect_rollout_data
    from rl2edge.export.sources.checkpoint import source_from_checkpoint
    from rl2edge.runtime.policy import Policy

    source = source_from_checkpoint(tf_run)
    data = collect_rollout_data(source.act, NOVEL, 2, 7, 10_000, 10_000, on_reset=source.reset)
    ref = source.trajectory(data.calibration, data.calibration_starts)
    served = Policy.load(tmp_path / "tf-art" / "fp32")
    got = []
    for o, start in zip(data.calibration, data.calibration_starts, strict=True):
        if start:
            served.reset()
        got.append(served.predict(o))
    top2 = np.sort(ref.pre_head, axis=-1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 1e-4
    assert decisive.mean() > 0.5
    assert np.array_equal(np.asarray(got)[decisive], ref.actions[decisive])


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_a_dict_of_vector_keys_exports_one_input_per_key_with_the_state(
    framework: str, tmp_path: Path
) -> None:
    """The AGV example's Dict observation (lidar, IMU, goal, speed) through ppo_lstm (MultiInputLstmPolicy):
    the file takes one input per key beside episode_start and the LSTM's state, and its fp32 file agrees
    with the source over whole episodes."""
    agv = "examples.agv:AgvDictEnv"
    run = tiny_train(agv, tmp_path / "run", steps=1024, algo="ppo_lstm", framework=framework, n_envs=2,
                     n_steps=256, batch_size=256, policy="MultiInputLstmPolicy", lstm_hidden_size=16)  # fmt: skip
    export_run(run, tmp_path / "art", "fp32")
    m = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert [k["name"] for k in m["model"]["input"]["keys"]] == [k["name"] for k in m["observation"]["keys"]]
    assert [t["name"] for t in m["state"]["tensors"]] == ["lstm_h_0", "lstm_c_0"]
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4


def test_a2c_lstm_traces_once_over_a_run_and_eager_equals_graph(tmp_path: Path) -> None:
    agents: list = []
    cfg = build_config(NOVEL, overrides={"n_timesteps": 2048, "eval_freq": 0}, algo="a2c_lstm")
    train("tf", NOVEL, cfg, 0, tmp_path / "a", device="cpu", progress=False, agent_out=agents)
    assert agents[0].trace_counts() == {"train_many": 1}  # 32 updates, one trace
    _, tf_agent, mbs = _pair_and_minibatches(NOVEL, 32, algo="a2c_lstm")
    eager_loss, eager_stats = tf_agent.loss(mbs[0], 0.0)
    graph_loss, graph_stats = tf.function(tf_agent.loss_fn)(*_loss_args(tf_agent, mbs[0], 0.0))
    assert abs(float(eager_loss) - float(graph_loss)) < 1e-6
    np.testing.assert_allclose(eager_stats.numpy(), graph_stats.numpy(), atol=1e-6)


def test_a_tf_checkpoint_with_one_lstm_bias_per_layer_is_refused() -> None:
    """TF checkpoints written before the TF LSTM kept torch's two biases lack `lstm_biases` in their
    network spec: loading one says to train again rather than failing on a weight count."""
    from rl2edge.errors import CheckpointError
    from rl2edge.train.tf_backend.recurrent_nets import TFRecurrentActorCritic

    _, network = recurrent_setup(NOVEL, 2, 16)
    assert network.lstm_biases == 2
    old = network.replace(lstm_biases=None)
    with pytest.raises(CheckpointError, match="train it again"):
        TFRecurrentActorCritic(old)
