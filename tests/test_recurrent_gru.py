"""The GRU option of the recurrent policies (`rnn_type: gru`): the numpy rollout's GRU is torch's nn.GRU, the
exported one-step cell (both routes) is the GRU that was trained, with one state tensor per layer, and an
int8 file keeps its gates in float and acts over whole episodes as `evaluate` and export recorded.

The parity of the GRU's training (torch == TF loss and gradients on copied weights, eager == graph, one
trace, the update replaying the rollout's states) runs in tests/test_recurrent.py and
tests/test_recurrent_tf.py, parametrized over the cell.

Tolerances: float32 GRUs in numpy, torch and TFLite sum their gate products in other orders and use other
sigmoid/tanh kernels; with the state carrying each step's rounding into the next, outputs over 400 steps
agree to 1e-5 (each step's own error is ~1e-7). The fp32 file is held to export's own 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl2edge.cli.app import main
from rl2edge.runtime.manifest import load_manifest
from rl2edge.runtime.policy import Policy
from rl2edge.train.core.recurrent_rollout import NumpyRecurrentActorCritic
from rl2edge.train.core.rnn_cells import rnn_step
from rl2edge.train.torch_backend.recurrent_nets import rnn_layers_numpy, run_rnn
from testkit.recurrent import SEQUENCE_OPS, assert_int8_cell_keeps_its_gates_float
from testkit.runs import tiny_train

pytestmark = pytest.mark.integration

NOVEL = "CartPoleNoVel-v1"
PENDULUM_NOVEL = "PendulumNoVel-v1"


def test_the_numpy_gru_is_torchs_nn_gru_with_the_episode_masks() -> None:
    """Two stacked layers over 3 envs' 12-step sequences: env 0 starts an episode at step 0, envs 1 and 2
    carry a non-zero state in, and envs 1 and 0 start again at steps 5 and 8 (their state zeroed there):
    train.core.rnn_cells' step against nn.GRU run stretch by stretch."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(5, 8, num_layers=2)
    x = torch.randn(12, 3, 5)
    starts = torch.zeros(12, 3)
    starts[0, 0] = starts[5, 1] = starts[8, 0] = 1
    h0 = (torch.randn(2, 3, 8),)
    first_only = torch.zeros_like(starts)
    first_only[0, 0] = 1
    with torch.no_grad():
        expected, _ = run_rnn(gru, x, starts, [5, 8], h0)
        unmasked, _ = run_rnn(gru, x, first_only, [], h0)
        from_zero, _ = run_rnn(gru, x[:1], torch.ones(1, 3), [], h0)  # step 0 with every state zeroed
    layers, state, got = rnn_layers_numpy(gru), (h0[0].numpy(),), []
    for t in range(12):
        keep = (1.0 - starts[t].numpy())[None, :, None]
        out, state = rnn_step("gru", layers, x[t].numpy(), (state[0] * keep,))
        got.append(out)
    np.testing.assert_allclose(np.stack(got), expected.numpy(), atol=1e-6)
    # the check can fail: without the starts at steps 5 and 8, envs 0 and 1 go on differently from there
    moved = np.abs(unmasked.numpy() - expected.numpy()).max(axis=-1)
    assert moved[:5].max() < 1e-6 and moved[5:, 1].min() > 1e-4 and moved[8:, 0].min() > 1e-4
    # and envs 1 and 2 did carry a non-zero state into step 0, env 0 did not
    step0 = np.abs(expected.numpy()[0] - from_zero.numpy()[0]).max(axis=-1)
    assert step0[0] < 1e-6 and step0[1:].min() > 1e-2


def test_a_checkpoint_with_an_unknown_cell_is_refused_by_every_reader() -> None:
    """A hand-edited network "rnn" (here "GRU") would otherwise build an LSTM in one reader and a GRU in
    another. The readers (the numpy rollout, both backends' networks, both export routes) take the typed
    NetworkSpec only, and no NetworkSpec holds an unknown cell: the file's JSON and an edited spec are
    refused where they are made."""
    from rl2edge.errors import CheckpointError
    from rl2edge.train.core.network_spec import NetworkSpec
    from testkit.recurrent import recurrent_setup

    _, network = recurrent_setup(NOVEL, 2, 16, rnn_type="gru")
    assert network.rnn == "gru" and NumpyRecurrentActorCritic(network).kind == "gru"
    with pytest.raises(CheckpointError, match="network rnn 'GRU' is not one of lstm, gru"):
        NetworkSpec.from_json({**network.to_json(), "rnn": "GRU"})
    with pytest.raises(CheckpointError, match="network rnn 'GRU' is not one of lstm, gru"):
        network.replace(rnn="GRU")


def _episodes(env_id: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` episodes of uniform random actions: raw observations [T, d], and True where an episode starts."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    obs: list[np.ndarray] = []
    starts: list[bool] = []
    for ep in range(n):
        o, _ = env.reset(seed=100 + ep)
        first, done = True, False
        while not done:
            obs.append(o)
            starts.append(first)
            o, _, term, trunc, _ = env.step(env.action_space.sample())
            first, done = False, term or trunc
    env.close()
    return np.asarray(obs, np.float32), np.asarray(starts)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_the_exported_gru_cell_is_the_gru_that_was_trained(framework: str, tmp_path: Path) -> None:
    """A 2-layer GRU policy on PendulumNoVel (a Box action: no near ties), trained briefly, exported in fp32
    by the CLI: one state tensor per layer, no sequence op; the source graph export verified (its GRU
    written gate by gate) equals the trained agent's own weights run by the numpy rollout's GRU over two
    whole episodes, and the file equals the source."""
    from rl2edge.export.sources.checkpoint import source_from_checkpoint
    from rl2edge.train.algos import build_config, train

    agents: list = []
    overrides = {"n_timesteps": 1024, "eval_freq": 0, "rnn_type": "gru", "n_lstm_layers": 2,
                 "lstm_hidden_size": 16, "n_envs": 2, "n_steps": 128, "batch_size": 128}  # fmt: skip
    cfg = build_config(PENDULUM_NOVEL, overrides=overrides, algo="ppo_lstm")
    run = tmp_path / "run"
    train(framework, PENDULUM_NOVEL, cfg, 0, run, device="cpu", progress=False, agent_out=agents)
    art = tmp_path / "art"
    args = ["export", str(run), "--quantize", "fp32", "--calib-episodes", "2", "--eval-episodes", "1",
            "--out", str(art), "--no-progress"]  # fmt: skip
    assert main(args) == 0

    m = load_manifest(art).data
    assert [t["name"] for t in m["state"]["tensors"]] == ["gru_h_0", "gru_h_1"]
    assert m["state"]["cell"].startswith("GRU")
    assert m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    import tensorflow as tf

    it = tf.lite.Interpreter(model_path=str(art / "policy.tflite"))
    ops = {op["op_name"] for op in it._get_ops_details()}
    assert not ops & SEQUENCE_OPS and {"LOGISTIC", "TANH", "FULLY_CONNECTED"} <= ops, ops

    from rl2edge.train.core.network_spec import NetworkSpec

    network = NetworkSpec.from_json(json.loads((run / "checkpoint.json").read_text())["network"])
    trained = NumpyRecurrentActorCritic(network)
    trained.load(agents[0].rollout_weights())
    trained.reset(1)
    source = source_from_checkpoint(run)
    obs, starts = _episodes(PENDULUM_NOVEL, 2)
    assert starts.sum() == 2 and len(obs) == 400
    means = [
        trained.deterministic(source.norm.normalize(o[None]), np.array([s]))
        for o, s in zip(obs, starts, strict=True)
    ]
    ref = source.trajectory(obs, starts)
    np.testing.assert_allclose(ref.pre_head, np.concatenate(means), atol=1e-5)
    assert np.abs(np.diff(ref.fed["gru_h_1"], axis=0)).max() > 1e-3  # the state moves: a real check

    served = Policy.load(art)
    got = []
    for o, s in zip(obs, starts, strict=True):
        if s:
            served.reset()
        got.append(served.predict(o))
    np.testing.assert_allclose(np.asarray(got), ref.actions, atol=1e-4)


def test_a_gru_policy_in_int8_keeps_its_gates_float_and_evaluates_as_export_recorded(
    tmp_path: Path, capfd
) -> None:
    """ppo_lstm with a GRU on CartPole with the velocities hidden, 20k steps, exported in int8 by the CLI:
    the gates and the state in float, some layer in int8, the held-out episodes acted with the state
    carried; `evaluate` through main() returns what export recorded for the file, and the runtime's state
    is the GRU's h, reset to zero."""
    run = tiny_train(NOVEL, tmp_path / "run", steps=20_480, algo="ppo_lstm", rnn_type="gru")
    art = tmp_path / "art"
    args = ["export", str(run), "--quantize", "int8", "--calib-episodes", "3", "--eval-episodes", "3",
            "--out", str(art), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    m = load_manifest(art).data
    assert [t["name"] for t in m["state"]["tensors"]] == ["gru_h_0"]
    assert "whole episodes" in m["quantization"]["calibration"]["sequences"]
    closed = m["verification"]["closed_loop"]
    assert closed["source"]["mean_return"] > 60  # it learned something: a random policy holds ~20

    assert_int8_cell_keeps_its_gates_float(art / "policy.tflite")

    capfd.readouterr()
    assert main(["evaluate", str(art), "--episodes", "3", "--seed", "0", "--json"]) == 0
    out = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert out["returns"] == closed["this_file"]["returns"]

    policy = Policy.load(art)
    obs, _ = _episodes(NOVEL, 1)
    for o in obs[:10]:
        policy.predict(o)
    assert set(policy.state()) == {"gru_h_0"} and np.abs(policy.state()["gru_h_0"]).max() > 0
    policy.reset()
    assert not np.any(policy.state()["gru_h_0"])
