"""The rollout's numpy actor-critic against each backend's own sampling (the agents' `act`), on the same
weights and noise: the same actions, log-probs and values within float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest

from rl2edge.train.core.numpy_policy import NumpyActorCritic
from testkit.agents import make_agent, network


def _net(activation: str, act_dim: int, discrete: bool) -> dict:
    return network(
        "ppo", 4, act_dim, discrete=discrete, net_arch=[64, 64], activation=activation, log_std_init=-0.3
    )


# Two stacks of different kernels (BLAS vs the framework's, Sleef vs libm tanh) over three layers: measured
# 2.4e-7 on log-probs and values of order 1; 1e-5 leaves room for other CPUs' kernels.
ATOL = 1e-5


def _agent(framework: str, net: dict):
    if framework == "tf":
        pytest.importorskip("tensorflow")
    return make_agent("ppo", framework, net, "CartPole-v1")


def _spread_actor_head(agent, framework: str) -> None:
    """PPO initializes the actor's head with gain 0.01 (logits near 0): scale it up so that the test's
    argmax decisions are not near ties."""
    if framework == "torch":
        agent.policy.actor[-1].weight.data.mul_(300.0)
    else:
        from rl2edge.train.tf_backend.nets import dense_layers

        head = dense_layers(agent.policy.actor)[-1]
        head.kernel.assign(head.kernel * 300.0)


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_numpy_rollout_policy_matches_the_backends_own_act(
    framework: str, discrete: bool, activation: str
) -> None:
    net = _net(activation, 3, discrete)
    agent = _agent(framework, net)
    _spread_actor_head(agent, framework)
    policy = NumpyActorCritic(net)
    policy.load(agent.rollout_weights())
    rng = np.random.default_rng(1)
    obs = rng.normal(scale=2.0, size=(16, 4)).astype(np.float32)
    noise = (rng.gumbel(size=(16, 3)) if discrete else rng.normal(size=(16, 3))).astype(np.float32)

    ref_action, ref_logp, ref_value = agent.act(obs, noise)
    action, logp, value = policy.act(obs, noise)
    assert logp.dtype == np.float32 and value.dtype == np.float32 and action.dtype == ref_action.dtype
    if discrete:
        top2 = np.sort(policy._mlp(policy._w.actor, obs) + noise, axis=-1)[:, -2:]
        assert (np.diff(top2, axis=-1) > 1e-3).all(), "the test's own precondition: no near ties"
        np.testing.assert_array_equal(action, ref_action)
        assert len(set(action.tolist())) > 1  # the samples are not all one action
    else:
        np.testing.assert_allclose(action, ref_action, atol=ATOL)
    np.testing.assert_allclose(logp, ref_logp, atol=ATOL)
    np.testing.assert_allclose(value, ref_value, atol=ATOL)
    assert np.abs(ref_value).max() > 0.1  # a critic whose outputs are not all near 0


def test_loaded_weights_are_a_frozen_copy() -> None:
    """torch's arrays are views of the parameters: the rollout must not see the optimizer's later steps."""
    import torch

    net = _net("tanh", 2, True)
    agent = _agent("torch", net)
    policy = NumpyActorCritic(net)
    policy.load(agent.rollout_weights())
    obs = np.ones((4, 4), np.float32)
    before = policy.value(obs).copy()
    with torch.no_grad():
        for p in agent.policy.parameters():
            p.add_(1.0)
    np.testing.assert_array_equal(policy.value(obs), before)
    policy.load(agent.rollout_weights())
    assert not np.allclose(policy.value(obs), before)


def test_unknown_activation_is_refused() -> None:
    with pytest.raises(ValueError, match="activation 'gelu'"):
        NumpyActorCritic(_net("gelu", 2, True))
