"""SAC and TD3 explore through train.core.numpy_actor on a CPU: the same policy as the framework's own
forward pass, on the weights of the latest training phase, with SAC's noise from the run's seed.

Tolerances: the numpy forward pass and the framework's run other matmul kernels and transcendental
functions, so they agree to float32 rounding through three layers (about 1e-7 here), held to 1e-5;
SAC's sampling is checked in distribution, 4000 draws per row, at 6 standard errors."""

from __future__ import annotations

import numpy as np
import pytest

from testkit.agents import SMALL_OBS, replay_batch, small_offpolicy_agent, small_offpolicy_spec

pytest.importorskip("tensorflow")  # half the cases are TF's
FRAMEWORKS = ["torch", "tf"]


def _obs(rows: int = 6, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, SMALL_OBS)).astype(np.float32)


def _sac_mean_log_std(agent, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The framework's own mean and clamped log-std of SAC's Gaussian."""
    if agent.framework == "torch":
        import torch

        with torch.no_grad():
            mean, log_std = agent.actor.mean_log_std(torch.as_tensor(obs))
        return mean.numpy(), log_std.numpy()
    nets = agent.nets
    h = nets.latent(obs)
    log_std = np.clip(nets.log_std(h).numpy(), nets.log_std_min, nets.log_std_max)
    return nets.mu(h).numpy(), log_std


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_td3_explores_with_the_frameworks_actor_before_and_after_training(framework: str) -> None:
    agent = small_offpolicy_agent(framework, "td3")
    assert agent.explorer is not None
    obs = _obs()
    before = agent.explore(obs)
    np.testing.assert_allclose(before, agent.framework_explore(obs), atol=1e-5)
    for _ in range(2):  # policy_delay 2: the second phase steps the actor
        agent.train(replay_batch(1, seed=1))
    after = agent.explore(obs)
    np.testing.assert_allclose(after, agent.framework_explore(obs), atol=1e-5)
    assert np.abs(after - before).max() > 1e-4  # the numpy actor read the new weights
    assert np.all(np.abs(after) <= 1.0)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sac_samples_the_frameworks_squashed_gaussian(framework: str) -> None:
    agent = small_offpolicy_agent(framework, "sac")
    agent.train(replay_batch(2, seed=1))  # weights that are not the initial ones
    obs = _obs(rows=2)
    mean, log_std = _sac_mean_log_std(agent, obs)
    head_mean, head_log_std = agent.explorer.forward(obs)
    np.testing.assert_allclose(head_mean, mean, atol=1e-5)
    np.testing.assert_allclose(np.clip(head_log_std, -20, 2), log_std, atol=1e-5)
    np.testing.assert_allclose(np.tanh(head_mean), agent.deterministic(obs), atol=1e-5)

    n = 4000
    draws = agent.explore(np.repeat(obs, n, axis=0)).reshape(2, n)
    assert np.all(np.abs(draws) < 1.0)
    pre = np.arctanh(np.clip(draws, -1 + 1e-6, 1 - 1e-6))  # back to the Gaussian before the squash
    std = np.exp(log_std[:, 0])
    assert np.all(np.abs(pre.mean(1) - mean[:, 0]) < 6 * std / np.sqrt(n))
    assert np.all(np.abs(pre.std(1) / std - 1) < 6 / np.sqrt(2 * n))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sac_exploration_noise_follows_the_seed_and_a_restored_state(framework: str) -> None:
    """The same seed explores alike; another seed draws other noise; set_state's weights reach the
    numpy actor (a resumed or rolled-back run explores with what it restored)."""
    obs = _obs()
    a, b, c = (small_offpolicy_agent(framework, "sac", seed) for seed in (0, 0, 1))
    np.testing.assert_array_equal(a.explore(obs), b.explore(obs))
    assert not np.allclose(a.explore(obs), c.explore(obs))

    saved = a.get_state()
    start = a.explorer.forward(obs)[0]
    a.train(replay_batch(3, seed=2))
    assert np.abs(a.explorer.forward(obs)[0] - start).max() > 1e-4
    a.set_state(saved)
    np.testing.assert_allclose(a.explorer.forward(obs)[0], start, atol=1e-6)


def test_the_numpy_actor_refuses_what_it_cannot_run() -> None:
    from rl2edge.train.core.numpy_actor import NumpyActor, Tanh

    with pytest.raises(ValueError, match="activation 'gelu'"):
        NumpyActor("gelu", list, Tanh())


def test_tf_refuses_an_explorer_made_after_its_graphs() -> None:
    """The TF training graph returns the explorer's weights only if it knew them when it was traced."""
    from rl2edge.train.core.numpy_actor import Tanh

    agent = small_offpolicy_agent("tf", "sac")
    with pytest.raises(RuntimeError, match="after compile"):
        agent.numpy_explorer(small_offpolicy_spec("sac").activation, agent.actor_vars, Tanh())
