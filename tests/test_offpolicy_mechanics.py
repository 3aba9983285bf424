"""Off-policy mechanics, in both backends: the polyak update moves every target weight by exactly tau,
TD3's actor steps every `policy_delay` critic steps (TF: in eager and in graph mode), SAC's temperature
optimizer moves log-alpha and nothing else, DQN's target follows its period, every compiled TF function
traces once, and the replay buffer keeps terminations apart from truncations."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from rl2edge.train.algos import build_config, get
from rl2edge.train.core.replay import ReplayBatch, ReplayBuffer
from testkit.agents import SMALL_OBS, replay_batch, small_offpolicy_agent

tf = pytest.importorskip("tensorflow")


# ------------------------------------------------------------------------------------------ polyak
@pytest.mark.parametrize("framework", ["torch", "tf"])
@pytest.mark.parametrize("tau", [0.005, 0.3, 1.0])
def test_polyak_moves_every_target_weight_by_exactly_tau(framework: str, tau: float) -> None:
    rng = np.random.default_rng(1)
    src = [rng.standard_normal(s).astype(np.float32) for s in [(16, 3), (16,), (1, 16)]]
    tgt = [rng.standard_normal(s.shape).astype(np.float32) for s in src]
    expected = [t + np.float32(tau) * (s - t) for s, t in zip(src, tgt, strict=True)]
    if framework == "torch":
        import torch

        from rl2edge.train.torch_backend.nets import polyak_update

        s_t = [torch.nn.Parameter(torch.tensor(s)) for s in src]
        t_t = [torch.nn.Parameter(torch.tensor(t), requires_grad=False) for t in tgt]
        polyak_update(s_t, t_t, tau)
        got = [t.detach().numpy() for t in t_t]
    else:
        from rl2edge.train.tf_backend.nets import polyak_update

        s_v, t_v = [tf.Variable(s) for s in src], [tf.Variable(t) for t in tgt]
        tf.function(lambda: polyak_update(s_v, t_v, tau), input_signature=[])()  # inside a graph
        got = [t.numpy() for t in t_v]
    for g, e, s, t in zip(got, expected, src, tgt, strict=True):
        if tau == 1.0:
            np.testing.assert_array_equal(g, s)  # a hard update copies exactly
        else:
            np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)
            moved = (g - t)[np.abs(s - t) > 1e-3] / (s - t)[np.abs(s - t) > 1e-3]
            np.testing.assert_allclose(moved, tau, rtol=1e-4)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_sac_targets_move_by_tau_in_a_training_step(framework: str) -> None:
    agent = small_offpolicy_agent(framework, "sac", tau=0.25)
    before_t = agent.variables("critic_target")
    agent.train(replay_batch(1))
    after_s, after_t = agent.variables("critic"), agent.variables("critic_target")
    for s, t0, t1 in zip(after_s, before_t, after_t, strict=True):
        np.testing.assert_allclose(t1, t0 + 0.25 * (s - t0), atol=1e-6)


# ------------------------------------------------------------------------------------ policy delay
def _actor_changes(agent, steps: int, call) -> list[int]:
    changed = []
    for i in range(1, steps + 1):
        before = agent.variables("actor")
        call(replay_batch(1, seed=i))
        if any(not np.array_equal(a, b) for a, b in zip(before, agent.variables("actor"), strict=True)):
            changed.append(i)
    return changed


@pytest.mark.parametrize("mode", ["torch", "tf-graph", "tf-eager"])
def test_td3_actor_steps_every_policy_delay_critic_steps(mode: str) -> None:
    agent = small_offpolicy_agent(mode.split("-")[0], "td3", policy_delay=3)
    if mode == "tf-eager":  # the same Python method the graph was traced from, run op by op

        def call(b: ReplayBatch):
            return agent.train_many_graph(
                *(tf.constant(x) for x in (b.obs, b.actions, b.rewards, b.next_obs, b.dones))
            )
    else:
        call = agent.train
    assert _actor_changes(agent, 7, call) == [3, 6]
    if mode != "torch":
        assert int(agent.n_updates.numpy()) == 7  # the counter lives in a tf.Variable
        assert int(agent.actor_opt.iterations.numpy()) == 2
        assert int(agent.critic_opt.iterations.numpy()) == 7
        # many steps in one compiled call count the same way
        agent.train(replay_batch(5))
        assert int(agent.n_updates.numpy()) == 12 and int(agent.actor_opt.iterations.numpy()) == 4


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_ddpg_is_td3_with_its_additions_switched_off(framework: str) -> None:
    cfg = build_config("Pendulum-v1", algo="ddpg")
    assert (cfg.policy_delay, cfg.target_policy_noise, cfg.n_critics) == (1, 0.0, 1)
    agent = small_offpolicy_agent(framework, "td3", policy_delay=1)
    assert _actor_changes(agent, 3, agent.train) == [1, 2, 3]


# -------------------------------------------------------------------------------- SAC temperature
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_sac_temperature_optimizer_moves_log_alpha_and_nothing_else(framework: str) -> None:
    agent = small_offpolicy_agent(framework, "sac")
    logp = np.full(8, -3.0, np.float32)  # entropy above target -> alpha must fall
    if framework == "torch":
        import torch

        params = [p for g in agent.alpha_opt.param_groups for p in g["params"]]
        assert len(params) == 1 and params[0] is agent.log_alpha
        others = {k: v.clone() for k, v in agent.nets.state_dict().items() if k != "log_alpha"}
        before = float(agent.log_alpha.detach())
        agent.alpha_step(torch.as_tensor(logp))
        after = float(agent.log_alpha.detach())
        for k, v in agent.nets.state_dict().items():
            if k != "log_alpha":
                assert torch.equal(v, others[k]), k
    else:
        log_alpha = agent.nets.log_alpha
        others = [(v.path, v.numpy().copy()) for v in agent.nets.variables if v is not log_alpha]
        before = float(log_alpha.numpy())
        agent.alpha_step(tf.constant(logp))
        after = float(log_alpha.numpy())
        for (path, value), v in zip(
            others, [v for v in agent.nets.variables if v is not log_alpha], strict=True
        ):
            np.testing.assert_array_equal(v.numpy(), value, err_msg=path)
        assert int(agent.actor_opt.iterations.numpy()) == 0 and int(agent.critic_opt.iterations.numpy()) == 0
    assert after < before  # target entropy -1 < 3: the temperature falls


# --------------------------------------------------------------------------------- DQN target period
def _target_is_online(agent) -> bool:
    pairs = zip(agent.variables("q"), agent.variables("q_target"), strict=True)
    return all(np.array_equal(a, b) for a, b in pairs)


@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_dqn_target_synced_on_its_period(framework: str, tmp_path: Path) -> None:
    from rl2edge.train.core.offpolicy_driver import train_offpolicy

    if framework == "torch":
        from rl2edge.train.torch_backend.dqn import TorchDQN as cls
    else:
        from rl2edge.train.tf_backend.dqn import TFDQN as cls

    class Recording(cls):  # the real agent, noting the target's state around each sync the driver asks for
        syncs: ClassVar[list[tuple[bool, bool]]] = []

        def update_target(self) -> None:
            before = _target_is_online(self)
            super().update_target()
            self.syncs.append((before, _target_is_online(self)))

    cfg = build_config(
        "CartPole-v1",
        overrides={"n_timesteps": 400, "learning_starts": 50, "target_update_interval": 100, "train_freq": 10,
                   "gradient_steps": 2, "batch_size": 16, "net_arch": [16], "eval_freq": 0, "eval_episodes": 1},
        algo="dqn",
    )  # fmt: skip
    network = get("dqn").network
    train_offpolicy("CartPole-v1", cfg, 0, tmp_path, Recording, network, device="cpu", progress=False)
    # env steps 100, 200, 300, 400; training moved the online net in between, each sync copied it
    assert Recording.syncs == [(False, True)] * 4


# ------------------------------------------------------------------------------ TF graph discipline
@pytest.mark.parametrize("algo", ["sac", "td3", "dqn"])
def test_tf_functions_trace_once_over_varying_batch_counts_and_sizes(algo: str) -> None:
    agent = small_offpolicy_agent("tf", algo)
    discrete = algo == "dqn"
    obs_dim = 4 if discrete else SMALL_OBS
    for n, b in [(1, 8), (3, 8), (2, 5), (7, 16)]:
        agent.train(replay_batch(n, b, discrete=discrete))
        obs = np.zeros((b, obs_dim), np.float32)
        agent.deterministic(obs)
        agent.explore(obs)  # SAC and TD3: the numpy actor (train.core.numpy_actor); DQN: the graph
        agent.framework_explore(obs)  # the graph, as on a GPU
        agent.set_learning_rate(1e-3 / n)  # a variable, not a retrace
        agent.update_target()
    assert agent.trace_counts() == {"deterministic": 1, "explore": 1, "train_many": 1, "update_target": 1}


# ------------------------------------------------------------------------------------ replay buffer
def test_replay_buffer_wraps_and_keeps_terminations_only() -> None:
    buf = ReplayBuffer(5, (2,), discrete=False, act_dim=1)
    for i in range(7):  # two envs per step would be the same call with n rows
        buf.add(
            np.full((1, 2), i, np.float32),
            np.full((1, 1), i / 10, np.float32),
            np.array([i], np.float32),
            np.full((1, 2), i + 0.5, np.float32),
            np.array([i == 6]),
        )
    assert len(buf) == 5 and buf.pos == 2
    assert sorted(buf.rewards.tolist()) == [2, 3, 4, 5, 6]  # the oldest two were overwritten
    batch = buf.sample(3, 64, np.random.default_rng(0), lambda o: o * 2)
    assert batch.obs.shape == (3, 64, 2) and batch.actions.shape == (3, 64, 1) and batch.n == 3
    np.testing.assert_array_equal(batch.next_obs, batch.obs + 1.0)  # normalized alike, pairs kept together
    np.testing.assert_array_equal(batch.dones, (batch.rewards == 6).astype(np.float32))


def test_configs_presets_and_errors() -> None:
    from rl2edge.errors import ConfigError

    sac = build_config("Pendulum-v1", algo="sac")
    assert sac.n_timesteps == 20_000 and sac.learning_rate(1.0) == 1e-3 and sac.learns_ent_coef()
    dqn = build_config("CartPole-v1", algo="dqn")
    assert (dqn.n_timesteps, dqn.train_freq, dqn.gradient_steps, dqn.target_update_interval) == (
        50_000,
        256,
        128,
        10,
    )
    assert dqn.epsilon(0) == 1.0 and dqn.epsilon(10**9) == pytest.approx(0.04)
    for algo, env in [("sac", "LunarLanderContinuous-v3"), ("td3", "MountainCarContinuous-v0"), ("dqn", "Acrobot-v1"),
                      ("dqn", "LunarLander-v3"), ("ddpg", "Pendulum-v1")]:  # fmt: skip
        assert build_config(env, algo=algo).n_timesteps > 0
    with pytest.raises(ConfigError, match="unknown SAC hyperparameter 'clip_range'"):
        build_config("Pendulum-v1", overrides={"clip_range": 0.2}, algo="sac")
    with pytest.raises(ConfigError, match="ent_coef"):
        build_config("Pendulum-v1", overrides={"ent_coef": "auto_x"}, algo="sac")
    with pytest.raises(ConfigError, match="noise_type"):
        build_config("Pendulum-v1", overrides={"noise_type": "pink"}, algo="td3")


@pytest.mark.parametrize("algo", ["sac", "td3", "dqn"])
def test_tf_eager_and_graph_leave_the_same_weights_and_adam_slots(algo: str) -> None:
    eager, graph = small_offpolicy_agent("tf", algo), small_offpolicy_agent("tf", algo)
    batch = replay_batch(4, discrete=algo == "dqn")
    tensors = [tf.constant(x) for x in (batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.dones)]
    for _ in range(2):
        eager.train_many_graph(*tensors)  # op by op, the same generator draws
        graph.train(batch)
    for a, b in zip(eager.nets.variables, graph.nets.variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6, err_msg=a.path)
    for opt_e, opt_g in zip(eager.optimizers, graph.optimizers, strict=True):
        for a, b in zip(opt_e.variables, opt_g.variables, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6, err_msg=a.path)


# ------------------------------------------------------------------------ actor loss through critics
def test_actor_loss_through_frozen_critics_gives_the_actor_its_gradient_and_the_critics_none() -> None:
    """torch: the actor's loss runs through the critics with their weights out of autograd (`frozen`): the
    actor's gradient is the same (the same input-gradient ops), no critic weight gradient is computed,
    and the flags come back, also when the block raises."""
    import torch

    from rl2edge.train.torch_backend.nets import frozen

    agent = small_offpolicy_agent("torch", "sac")
    obs = torch.as_tensor(replay_batch(1, b=32).obs[0])

    def grads(freeze: bool) -> tuple[list, list]:
        for p in [*agent.actor.parameters(), *agent.critic.parameters()]:
            p.grad = None
        torch.manual_seed(5)  # the same sample's noise
        pi, logp = agent.actor.sample(obs)
        if freeze:
            with frozen(agent.critic):
                loss = (0.1 * logp - torch.min(*agent.critic(obs, pi))).mean()
        else:
            loss = (0.1 * logp - torch.min(*agent.critic(obs, pi))).mean()
        loss.backward()
        return [p.grad.clone() for p in agent.actor.parameters()], [p.grad for p in agent.critic.parameters()]

    actor_all, critic_all = grads(freeze=False)
    actor_frozen, critic_frozen = grads(freeze=True)
    assert all(g is not None for g in critic_all) and all(g is None for g in critic_frozen)
    for a, b in zip(actor_all, actor_frozen, strict=True):
        assert torch.equal(a, b)
    assert all(p.requires_grad for p in agent.critic.parameters())
    with pytest.raises(RuntimeError), frozen(agent.critic):
        raise RuntimeError("inside")
    assert all(p.requires_grad for p in agent.critic.parameters())
    # TD3's actor loss takes Q_1 alone: the same values as the first of all critics
    td3 = small_offpolicy_agent("torch", "td3")
    act = torch.as_tensor(replay_batch(1, b=32).actions[0])
    assert torch.equal(td3.critic.first(obs, act), td3.critic(obs, act)[0])


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_torch_actor_steps_run_the_critics_frozen(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the agents' autograd update: the critic step runs the critics trainable, the actor step frozen.
    (The written-out update, the default, never computes the critics' weight gradients in the actor's
    step; tests/test_offpolicy_grad.py holds its gradients to these.)"""
    from rl2edge.train.torch_backend.nets import Critics

    agent = small_offpolicy_agent("torch", algo, **({"policy_delay": 1} if algo == "td3" else {}))
    agent.autograd = True
    seen: list[tuple[str, bool]] = []
    for name in ("forward", "first"):
        real = getattr(Critics, name)

        def spy(self, *args, _real=real, _name=name):
            if self is agent.critic:
                seen.append((_name, all(p.requires_grad for p in self.parameters())))
            return _real(self, *args)

        monkeypatch.setattr(Critics, name, spy)
    agent.train(replay_batch(2, b=16))
    actor_call = "first" if algo == "td3" else "forward"
    assert seen == [("forward", True), (actor_call, False)] * 2
    assert all(p.requires_grad for p in agent.critic.parameters())


# ------------------------------------------------------------------------------------ CPU threads
def test_threads_reach_the_framework_and_a_fixed_count_reproduces_the_run(tmp_path: Path) -> None:
    """`train(threads=2)`: torch's intra-op threads while the agent trains; the same seed and thread count
    twice gives the same weights (a 2-thread matmul splits its work the same way every time); the next
    run without it is back at one thread."""
    import torch

    from rl2edge.train.algos import train
    from testkit.runs import assert_same_weights

    cfg = build_config(
        "Pendulum-v1",
        overrides={
            "n_timesteps": 200,
            "learning_starts": 100,
            "eval_freq": 0,
            "eval_episodes": 1,
            "net_arch": [256, 256],
        },
        algo="sac",
    )  # fmt: skip  (100 gradient steps: a 2-thread matmul's split shows in the first)
    seen = []

    class Probe(list):
        def append(self, agent) -> None:
            seen.append(torch.get_num_threads())
            super().append(agent)

    for name, threads in (("a", 2), ("b", 2), ("c", None)):
        (tmp_path / name).mkdir()
        kw = {} if threads is None else {"threads": threads}
        train("torch", "Pendulum-v1", cfg, 0, tmp_path / name, device="cpu", progress=False,
              agent_out=Probe(), **kw)  # fmt: skip
    assert seen == [2, 2, 1]
    assert_same_weights(tmp_path / "a", tmp_path / "b")


# ------------------------------------------------------------------------------------ learning rate
@pytest.mark.parametrize(("rate", "calls"), [(1e-3, 1), ("lin_1e-3", 200)])
def test_the_driver_sets_the_learning_rate_when_the_schedule_moves(tmp_path: Path, rate, calls) -> None:
    """A constant rate goes to the agent once (TF assigns a variable per optimizer: 0.3 ms a step for
    SAC's three, measured), a linear one every training phase; the optimizers end at the schedule's
    last value either way."""
    from rl2edge.train.algos import train

    cfg = build_config(
        "Pendulum-v1",
        overrides={"n_timesteps": 300, "learning_starts": 100, "eval_freq": 0, "eval_episodes": 1,
                   "net_arch": [16], "learning_rate": rate},
        algo="sac",
    )  # fmt: skip
    given: list[float] = []

    class Probe(list):
        def append(self, agent) -> None:
            set_lr = agent.set_learning_rate
            agent.set_learning_rate = lambda lr: (given.append(lr), set_lr(lr))
            super().append(agent)

    agents = Probe()
    train("torch", "Pendulum-v1", cfg, 0, tmp_path / "run", device="cpu", progress=False, agent_out=agents)
    assert len(given) == calls
    last = cfg.learning_rate(1.0 - 300 / 300)
    assert given[-1] == pytest.approx(last)
    assert all(g["lr"] == pytest.approx(last) for o in agents[0].optimizers for g in o.param_groups)


def test_numpy_blas_runs_on_one_thread_during_an_offpolicy_run(tmp_path: Path) -> None:
    """The explorer's numpy matmuls on one OpenBLAS thread while the run lasts (its idle worker spun on
    sched_yield and held the second core), and the process's own setting back afterwards."""
    from threadpoolctl import ThreadpoolController

    from rl2edge.train.algos import train

    cfg = build_config(
        "Pendulum-v1",
        overrides={"n_timesteps": 200, "learning_starts": 100, "eval_freq": 0, "eval_episodes": 1,
                   "net_arch": [16]},
        algo="sac",
    )  # fmt: skip

    def blas() -> list[int]:  # numpy's own OpenBLAS (another package may load an older one that stays at 1)
        libs = ThreadpoolController().select(user_api="blas").info()
        return [lib["num_threads"] for lib in libs if "numpy" in lib["filepath"]]

    seen = []

    class Probe(list):
        def append(self, agent) -> None:
            seen.append(blas())
            super().append(agent)

    with ThreadpoolController().select(user_api="blas").limit(limits=2):
        assert blas() and set(blas()) == {2}
        train(
            "torch", "Pendulum-v1", cfg, 0, tmp_path / "run", device="cpu", progress=False, agent_out=Probe()
        )
        assert set(blas()) == {2}
    assert seen and set(seen[0]) == {1}


# ------------------------------------------------------------------------------ TF XLA (--compile)
def _train_both(algo: str, xla_twin: bool, **overrides: object):
    """An agent as a graph (or as XLA with `xla_twin`) and one as XLA, trained on the same batches."""
    first, xla = (
        small_offpolicy_agent("tf", algo, **overrides),
        small_offpolicy_agent("tf", algo, **overrides),
    )
    if xla_twin:
        first.compile_update()
    xla.compile_update()
    for n, b in [(2, 8), (3, 8), (2, 8)]:
        batch = replay_batch(n, b, discrete=algo == "dqn")
        first.train(batch)
        xla.train(batch)
    assert xla.trace_counts()["train_many"] == 1  # once over the batch counts a run gives it
    return first, xla


@pytest.mark.parametrize("algo", ["td3", "dqn"])
def test_tf_xla_training_phase_traces_once_and_learns_what_the_graph_learns(algo: str) -> None:
    """`train --compile` on TF off-policy agents: the training phase as one XLA computation leaves the
    weights and Adam's slots where the graph leaves them, within 1e-5 (XLA fuses the elementwise work and
    runs its own matmuls, so sums may round differently). Without random draws: XLA's normal sampler
    turns the generator's Philox state into other numbers than TF's kernel (TD3's smoothing noise off)."""
    graph, xla = _train_both(algo, xla_twin=False, **({"target_policy_noise": 0.0} if algo == "td3" else {}))
    for a, b in zip(graph.nets.variables, xla.nets.variables, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5, err_msg=a.path)
    for opt_g, opt_x in zip(graph.optimizers, xla.optimizers, strict=True):
        for a, b in zip(opt_g.variables, opt_x.variables, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-5, err_msg=a.path)
    if algo == "td3":  # the numpy explorer reads the weights the XLA call returns
        obs = np.random.default_rng(0).standard_normal((4, SMALL_OBS)).astype(np.float32)
        np.testing.assert_allclose(xla.explore(obs), graph.explore(obs), rtol=0, atol=1e-5)


@pytest.mark.integration  # 10-30 s: the integration tier, which CI runs too (make test stays under 15 min)
def test_tf_xla_sac_is_seeded_and_steps_every_optimizer() -> None:
    """SAC draws in every step, so its XLA run is held to itself: the same seed gives the same weights
    (one compiled computation, run twice in one process), and every optimizer stepped."""
    one, two = _train_both("sac", xla_twin=True)
    for a, b in zip(one.nets.variables, two.nets.variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    fresh = small_offpolicy_agent("tf", "sac")
    for part in ("actor", "critic", "critic_target"):
        for a, b in zip(fresh.variables(part), two.variables(part), strict=True):
            assert not np.array_equal(a, b), part
    assert [int(opt.iterations.numpy()) for opt in two.optimizers] == [7, 7, 7]
