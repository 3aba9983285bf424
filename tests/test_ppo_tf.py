"""TensorFlow PPO: graph discipline (one trace per compiled function, flat memory), eager/graph parity,
torch/TF parity of loss and gradients, seeding, and the SavedModel route to TFLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rl2edge.train.algos import build_config, train  # noqa: E402
from rl2edge.train.core.rollout import Minibatch  # noqa: E402
from testkit.agents import make_agent, network  # noqa: E402
from testkit.runs import tiny_train  # noqa: E402


def _net(discrete: bool, log_std_init: float = 0.0) -> dict:
    return network(
        "ppo",
        4,
        2 if discrete else 1,
        discrete=discrete,
        net_arch=[64, 64],
        activation="tanh",
        log_std_init=log_std_init,
    )


def tf_train(env_id: str, out: Path, steps: int, seed: int = 0, **overrides: object):
    cfg = build_config(
        env_id, overrides={"n_timesteps": steps, "eval_freq": steps // 2, "eval_episodes": 2, **overrides}
    )
    out.mkdir(parents=True, exist_ok=True)
    agents: list = []
    result = train("tf", env_id, cfg, seed, out, device="cpu", progress=False, agent_out=agents)
    return result, agents[0]


def _agent(discrete: bool, seed: int = 0, **cfg_overrides: object):
    agent = make_agent("ppo", "tf", _net(discrete), "CartPole-v1", seed, **cfg_overrides)
    return agent, agent.cfg


def _batch(n: int, discrete: bool, rng: np.random.Generator) -> Minibatch:
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    actions = rng.integers(0, 2, n).astype(np.int64) if discrete else f(n, 1)
    return Minibatch(f(n, 4), actions, f(n) - 1.0, f(n), f(n), f(n))


def test_every_compiled_function_traces_once_over_a_run(tmp_path: Path) -> None:
    # The CartPole preset: every update's 20 epochs go to the fused, XLA-compiled call.
    _, agent = tf_train("CartPole-v1", tmp_path / "r", 2048)
    assert agent.trace_counts() == {
        "act": 1,
        "deterministic": 1,
        "train_step": 0,
        "train_many": 1,
    }
    assert int(agent.updates.numpy()) == 8 * 20  # a tf.Variable counter, incremented in the graph
    # batch_size 96 over 256-step rollouts: minibatches of 96, 96 and 64, one call each, still one trace
    _, agent = tf_train("CartPole-v1", tmp_path / "r2", 1024, batch_size=96, n_epochs=2)
    assert agent.trace_counts() == {
        "act": 1,
        "deterministic": 1,
        "train_step": 1,
        "train_many": 0,
    }
    assert int(agent.updates.numpy()) == 4 * 2 * 3


def test_memory_stays_flat_over_thousands_of_steps() -> None:
    import psutil

    agent, _ = _agent(discrete=True)
    rng = np.random.default_rng(0)
    batches = [_batch(n, True, rng) for n in (64, 50, 33)]
    proc = psutil.Process(os.getpid())
    for i in range(500):  # warm-up: allocator pools and the first trace
        agent.train_step(batches[i % 3], 0.2)
    before = proc.memory_info().rss
    for i in range(3000):
        agent.train_step(batches[i % 3], 0.1 + 0.1 * (i % 2))  # a changing clip range must not retrace
    grown_mb = (proc.memory_info().rss - before) / 2**20
    assert agent.trace_counts()["train_step"] == 1
    assert grown_mb < 20, f"RSS grew {grown_mb:.1f} MB over 3000 steps"


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("discrete", [True, False])
def test_eager_and_graph_updates_agree(discrete: bool, fused: bool) -> None:
    rng = np.random.default_rng(1)
    batches = [_batch(64, discrete, rng) for _ in range(3)]
    states = []
    for eager in (False, True):
        tf.config.run_functions_eagerly(eager)
        try:
            agent, _ = _agent(discrete, seed=3)
            if fused:  # the XLA-compiled call that runs all minibatches of an update
                agent.train_minibatches(batches, 0.2)
            else:
                for mb in batches:
                    agent.train_step(mb, 0.2)
            states.append(
                [v.numpy() for v in agent.policy.trainable_variables]
                + [v.numpy() for v in agent.optimizer.variables]
            )
        finally:
            tf.config.run_functions_eagerly(False)
    graph, eager_ = states
    assert len(graph) == len(eager_) > 8  # weights plus Adam's iterations, m and v slots
    # Two executions of the same math: graph mode (and XLA, fused) may reorder float32 sums, so gradients
    # differ by ~1e-6 relative (64-term reductions); Adam moves a weight by lr (3e-4) times a ratio that
    # carries that relative error: 3 steps stay far below 1e-5. Not bit for bit: kernels vary by CPU.
    for g, e in zip(graph, eager_, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("discrete", [True, False])
def test_torch_and_tf_give_the_same_loss_and_gradients(discrete: bool) -> None:
    import torch

    from rl2edge.train.torch_backend.nets import ActorCritic
    from rl2edge.train.torch_backend.ppo import ppo_loss

    agent, cfg = _agent(discrete, ent_coef=0.01, clip_range_vf=0.2)
    torch.manual_seed(0)
    spec = _net(discrete, log_std_init=-0.3)
    net = ActorCritic.from_network_spec(spec)
    agent.policy.copy_from_torch(net.state_dict())
    mb = _batch(128, discrete, np.random.default_rng(2))

    t = torch.as_tensor
    logp, ent, values = net.evaluate_actions(t(mb.obs), t(mb.actions))
    loss_t, *_ = ppo_loss(
        logp, ent, values, t(mb.old_logprobs), t(mb.old_values), t(mb.advantages), t(mb.returns), 0.2, cfg
    )
    loss_t.backward()
    grads_t = {k: p.grad.numpy() for k, p in net.named_parameters()}

    with tf.GradientTape() as tape:
        loss_f, _ = agent.loss_fn(
            mb.obs, mb.actions, mb.old_logprobs, mb.old_values, mb.advantages, mb.returns, tf.constant(0.2)
        )
    pairs = agent.policy._pairs()
    grads_f = tape.gradient(loss_f, [v for _, v in pairs])
    assert abs(float(loss_f) - loss_t.item()) < 1e-5
    for (name, _), g in zip(pairs, grads_f, strict=True):
        g = g.numpy().T if name.endswith(".weight") else g.numpy()
        np.testing.assert_allclose(g, grads_t[name], atol=1e-5, rtol=0, err_msg=name)


def test_same_seed_same_tf_run(tmp_path: Path) -> None:
    import h5py

    def weights(run: Path) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        with h5py.File(run / "policy.weights.h5") as f:
            f.visititems(lambda _, obj: out.append(obj[()]) if isinstance(obj, h5py.Dataset) else None)
        return out

    runs = [
        tf_train("CartPole-v1", tmp_path / name, 1024, seed=s)[0].run_dir
        for name, s in (("a", 5), ("b", 5), ("c", 6))
    ]
    a, b, c = (weights(r) for r in runs)
    assert len(a) >= 6 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    # The .weights.h5 file itself is not byte-stable (HDF5 stamps object times), so its sha256 differs;
    # everything else in checkpoint.json is the same.
    meta = [json.loads((r / "checkpoint.json").read_text()) for r in runs[:2]]
    for m in meta:
        m["weights"].pop("sha256")
    assert meta[0] == meta[1]


def test_tf_checkpoint_exports_through_the_savedmodel_route(tmp_path: Path) -> None:
    from rl2edge.export.pipeline import ExportOptions, export_path
    from rl2edge.runtime import Policy, load_manifest

    result, _ = tf_train("Pendulum-v1", tmp_path / "run", 1024, n_envs=2, n_steps=256, batch_size=128)
    meta = json.loads((result.run_dir / "checkpoint.json").read_text())
    assert meta["framework"] == "tf" and meta["weights"]["file"] == "policy.weights.h5"
    export_path(
        result.run_dir,
        tmp_path / "art",
        ExportOptions(quantize="int8", calib_episodes=2, eval_episodes=2, progress=False),
    )
    m = load_manifest(tmp_path / "art").data
    assert m["onnx"] is None and "policy.onnx" not in m["files"] and m["source"]["framework"] == "tf"
    assert m["model"]["input"]["dtype"] == "float32" and m["quantization"]["mode"] == "int8"
    policy = Policy.load(tmp_path / "art")
    assert policy.predict(np.zeros(3, np.float32)).shape == (1,)
    # the fp32 file of the same run, checked by the pipeline against the tf.function within 1e-4, in a
    # fresh interpreter that must never load torch: the TF route needs none of it
    code = (
        "import sys\n"
        "from export.pipeline import ExportOptions, export_path\n"
        f"export_path({str(result.run_dir)!r}, {str(tmp_path / 'fp32')!r}, "
        "ExportOptions(quantize='fp32', calib_episodes=2, eval_episodes=2, progress=False))\n"
        "assert 'torch' not in sys.modules, 'the TF export route imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert load_manifest(tmp_path / "fp32").data["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4


def test_torch_run_is_unaffected_by_the_tf_backend(tmp_path: Path) -> None:
    # The shared driver serves both; a torch run still writes its safetensors checkpoint.
    run = tiny_train("CartPole-v1", tmp_path / "t", steps=512)
    assert json.loads((run / "checkpoint.json").read_text())["framework"] == "torch"
