"""What the recurrent tests share: a ppo_lstm config and network for an env, and real rollouts of the numpy
LSTM policy (train.core.recurrent_rollout) in a sequence buffer, the second one starting from the states
the first left behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rl2edge.specs import ActionTransform
from rl2edge.train.algos import build_config
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.onpolicy_driver import onpolicy_network
from rl2edge.train.core.recurrent_rollout import RecurrentCollector, SequenceBuffer
from rl2edge.train.core.rollout_collector import Segment
from rl2edge.train.core.spaces import action_spec


def recurrent_setup(
    env_id: str, n_envs: int, n_steps: int, algo: str = "ppo_lstm", **overrides: object
) -> tuple[Any, dict[str, Any]]:
    """(config, network spec) of `algo` on `env_id`: ppo_lstm's minibatches are 2 envs' whole sequences,
    a2c_lstm's the whole rollout."""
    batch = {"batch_size": 2 * n_steps} if algo == "ppo_lstm" else {}
    cfg = build_config(
        env_id, overrides={"n_envs": n_envs, "n_steps": n_steps, **batch, **overrides}, algo=algo
    )
    env = gym.make(env_id)
    act = action_spec(env.action_space)
    obs_dim = int(np.prod(env.observation_space.shape))
    env.close()
    return cfg, onpolicy_network(cfg, "recurrent_actor_critic", obs_dim, act.output_width, act.discrete)


def recurrent_rollouts(
    env_id: str, cfg: Any, network: NetworkSpec, weights: Any, rounds: int = 2
) -> tuple[SequenceBuffer, Segment]:
    """`rounds` rollouts acted with `weights` (an agent's rollout_weights()); the buffer holds the last, its
    advantages computed, and the last segment."""
    env = gym.make(env_id)
    act = action_spec(env.action_space)
    env.close()
    n, t_max, obs_dim = cfg.n_envs, cfg.n_steps, int(network.obs_dim)
    collector = RecurrentCollector(
        env_id,
        0,
        n,
        0,
        cfg.gamma,
        network,
        RunningNormalizer((obs_dim,)),
        True,
        ActionTransform(act).to_env,
        n,
    )
    buffer = SequenceBuffer(t_max, n, (obs_dim,), act.discrete, act.output_width)
    for _ in range(rounds):
        seg = collector.collect(t_max, weights)
        for t in range(t_max):
            buffer.add(seg.obs[t], seg.actions[t], seg.logprobs[t], seg.values[t],
                       seg.rewards[t].astype(np.float32), seg.dones[t])  # fmt: skip
        buffer.set_sequences(seg.starts, seg.init_state)
        buffer.finish(seg.last_values, cfg.gamma, cfg.gae_lambda)
    collector.close()
    return buffer, seg


# What a recurrent artifact must not hold: a sequence op, a While loop or hidden variable tensors
SEQUENCE_OPS = {"WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN", "LSTM", "VAR_HANDLE",
                "READ_VARIABLE"}  # fmt: skip


def assert_int8_cell_keeps_its_gates_float(model_path: Path) -> None:
    """An int8 recurrent file: one explicit cell (no SEQUENCE_OPS), some FULLY_CONNECTED with int8 weights
    (the actor's hidden layer), and every LOGISTIC and TANH output in float32 (the gates, whose error the
    state would carry from step to step)."""
    import tensorflow as tf

    it = tf.lite.Interpreter(model_path=str(model_path))
    ops = it._get_ops_details()
    assert not {op["op_name"] for op in ops} & SEQUENCE_OPS
    details = {d["index"]: d for d in it.get_tensor_details()}
    assert any(
        op["op_name"] == "FULLY_CONNECTED" and details[op["inputs"][1]]["dtype"] == np.int8 for op in ops
    )
    for op in ops:
        if op["op_name"] in ("LOGISTIC", "TANH"):
            assert details[op["outputs"][0]]["dtype"] == np.float32, op
