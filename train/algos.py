"""The algorithm table: one row per algorithm, read by everything that used to keep its own table keyed
by name (the CLI's --algo choices, the config lookup, the agent of each backend, the action-space check,
the export head).

Adding an algorithm: one row here, one config class, one agent module per backend, a preset file
(docs/architecture.md lists the exact files). Everything in a row is a string or a "module:attribute"
path imported when asked for, so that reading the table imports no deep-learning framework.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl2edge.errors import CheckpointError, ConfigError, TrainingError
from rl2edge.train.core.config import OnPolicyConfig
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.threads import set_cpu_threads

if TYPE_CHECKING:  # importlib.resources.abc is 3.11's; the device's CPython 3.10 reads annotations as text
    from importlib.resources.abc import Traversable

    from rl2edge.train.core.config import RunConfig
    from rl2edge.train.core.evaluation import EvalResult
    from rl2edge.train.core.run import TrainResult

_logger = logging.getLogger(__name__)

FRAMEWORKS = ("torch", "tf")
DEFAULT = "ppo"  # the CLI's --algo when none is given


@dataclass(frozen=True)
class Algo:
    name: str
    config: str
    """"module:Class" of its hyperparameters (SB3's names and defaults)."""
    agents: dict[str, str]
    """framework -> "module:Class" of the agent the driver steps."""
    actions: tuple[str, ...]
    """The action spaces it trains on: "discrete", "multi_discrete" (MultiDiscrete and MultiBinary), "box"."""
    head: str
    """The head its deterministic policy ends in for Box actions (export/deployable.py); Discrete: argmax."""
    network: str
    """The checkpoint's network type (network["type"]), from which export rebuilds the policy; algorithms
    with the same networks share it (TD3 and DDPG, PPO and A2C)."""
    on_policy: bool
    """Trains on fresh rollouts (the on-policy driver; --rollout-workers spreads them over Ray actors)."""
    compiled: dict[str, str] = field(default_factory=dict)
    """framework -> what `train --compile` compiles of its update; a framework not here has no compiled form."""
    compile_notes: dict[str, str] = field(default_factory=dict)
    """framework -> why --compile has nothing to add there (its update is compiled already, say)."""
    preset: str | None = None
    """The preset file (YAML keyed by env id, Zoo style); None: train/presets/<name>.yml."""
    image_keys: bool = False
    """Its networks take a Dict observation's image keys (a Nature-CNN each, train.core.encoder_spec)."""
    builds_on: tuple[str, ...] = ()
    """The algorithms whose agent or config this one extends, so that its modules name them: A2C's agent is
    PPO's with another update, DDPG's is TD3's, Rainbow's DQN's, ppo_lstm's PPO's with a recurrent cell,
    a2c_lstm's ppo_lstm's network and rollout with A2C's update."""
    recurrent: bool = False
    """Its policy carries a state per env (a recurrent cell, the config's `network_fields`): its rollouts
    stay in the learner's process, where each env's state is (no --rollout-workers)."""

    @property
    def driver(self) -> str:
        """ "module:function" of its training loop: on-policy rollouts or off-policy replay."""
        return _ON_DRIVER if self.on_policy else _OFF_DRIVER

    @property
    def label(self) -> str:
        return self.name.upper()

    def preset_file(self) -> Traversable:
        if self.preset is not None:
            return Path(self.preset)
        return resources.files("rl2edge.train.presets").joinpath(f"{self.name}.yml")

    def config_class(self) -> type:
        return _load(self.config)

    def agent_class(self, framework: str) -> type:
        if framework not in self.agents:
            raise ConfigError(f"--framework {framework!r}: choose one of {', '.join(self.agents)}")
        return _load(self.agents[framework])

    def check_action_space(self, kind: str, env_id: str) -> None:
        """`kind`: the env's ActionSpec.kind (discrete, multi_discrete or box)."""
        if kind not in self.actions:
            fits = [a.name for a in ALGOS.values() if kind in a.actions]
            raise ConfigError(
                f"{self.name.upper()} needs a {_either(_SPACE_NAMES[a] for a in self.actions)} action space and "
                f"{env_id} has a {_SPACE_NAMES[kind]} one; use {_either(fits)}"
            )


_SPACE_NAMES = {"discrete": "Discrete", "multi_discrete": "MultiDiscrete/MultiBinary", "box": "Box"}


def _either(words: Any) -> str:
    w = list(words)
    return w[0] if len(w) == 1 else f"{', '.join(w[:-1])} or {w[-1]}"


_ON_DRIVER = "rl2edge.train.core.onpolicy_driver:train_onpolicy"
_OFF_DRIVER = "rl2edge.train.core.offpolicy_driver:train_offpolicy"
_OFF_CONFIG = "rl2edge.train.core.offpolicy_config"
# What `--compile` compiles, per framework: torch's on-policy update (torch.compile of the forward pass and
# the loss), torch's SAC and TD3/DDPG gradient step (torch.compile of the written-out step with its Adam
# steps), and TF's off-policy training phase (one XLA computation); TF's PPO and A2C always run theirs as XLA.
_TORCH_ON_COMPILED = "run the forward pass and loss as one torch.compile graph"
_TORCH_OFF_COMPILED = "the gradient step with its Adam steps"
_TF_OFF_COMPILED = "the training phase as one XLA computation"
_TF_ON_NOTE = "TensorFlow's PPO and A2C already run their update as one XLA call (jit_compile)"


def _agents(module: str, torch_class: str, tf_class: str) -> dict[str, str]:
    """The agent class of each backend: train/<backend>_backend/<module>.py, the same module name in both."""
    return {
        "torch": f"rl2edge.train.torch_backend.{module}:{torch_class}",
        "tf": f"rl2edge.train.tf_backend.{module}:{tf_class}",
    }


def _on_policy(
    name: str,
    config: str,
    agents: dict[str, str],
    network: str,
    actions: tuple[str, ...] = ("discrete", "multi_discrete", "box"),
    **rest: Any,
) -> Algo:
    """A row of the on-policy driver: Discrete, MultiDiscrete/MultiBinary (one categorical head per
    component, SB3's MultiCategoricalDistribution) and Box actions, PPO's clipped head."""
    return Algo(name, config, agents, actions, "clip_unscale", network=network, on_policy=True, **rest)


def _off_policy(
    name: str,
    config: str,
    agents: dict[str, str],
    actions: tuple[str, ...],
    head: str,
    network: str,
    **rest: Any,
) -> Algo:
    """A row of the off-policy driver, its config in train.core.offpolicy_config; every one takes image keys."""
    return Algo(
        name,
        f"{_OFF_CONFIG}:{config}",
        agents,
        actions,
        head,
        network=network,
        on_policy=False,
        image_keys=True,
        **rest,
    )


_CONFIG = "rl2edge.train.core.config"
_RECURRENT_CONFIG = "rl2edge.train.core.recurrent_config"
_ON_MLP: dict[str, Any] = {
    "image_keys": True,
    "compiled": {"torch": _TORCH_ON_COMPILED},
    "compile_notes": {"tf": _TF_ON_NOTE},
}
_OFF_BOTH_COMPILED = {"compiled": {"torch": _TORCH_OFF_COMPILED, "tf": _TF_OFF_COMPILED}}

ALGOS: dict[str, Algo] = {
    a.name: a
    for a in (
        _on_policy("ppo", f"{_CONFIG}:PPOConfig", _agents("ppo", "TorchPPO", "TFPPO"), "actor_critic_mlp", **_ON_MLP),
        # PPO's driver and networks; one gradient step per rollout, RMSprop
        _on_policy(
            "a2c", f"{_CONFIG}:A2CConfig", _agents("a2c", "TorchA2C", "TFA2C"), "actor_critic_mlp",
            builds_on=("ppo",), **_ON_MLP,
        ),
        _off_policy(
            "sac", "SACConfig", _agents("sac", "TorchSAC", "TFSAC"), ("box",), "tanh_unscale", "sac_mlp",
            **_OFF_BOTH_COMPILED,
        ),
        _off_policy(
            "td3", "TD3Config", _agents("td3", "TorchTD3", "TFTD3"), ("box",), "unscale", "td3_mlp",
            **_OFF_BOTH_COMPILED,
        ),
        # TD3's agent and networks with DDPG's config (one critic, no target smoothing, no delay)
        _off_policy(
            "ddpg", "DDPGConfig", _agents("td3", "TorchTD3", "TFTD3"), ("box",), "unscale", "td3_mlp",
            builds_on=("td3",), **_OFF_BOTH_COMPILED,
        ),
        _off_policy(
            "dqn", "DQNConfig", _agents("dqn", "TorchDQN", "TFDQN"), ("discrete",), "argmax", "dqn_mlp",
            compiled={"tf": _TF_OFF_COMPILED},
        ),
        # DQN's agent with n-step, prioritized replay; every component switchable
        _off_policy(
            "rainbow", "RainbowConfig", _agents("rainbow", "TorchRainbow", "TFRainbow"), ("discrete",), "argmax",
            "rainbow_mlp", compiled={"tf": _TF_OFF_COMPILED}, builds_on=("dqn",),
        ),
        # PPO with an LSTM or GRU (sb3-contrib's RecurrentPPO): the artifact carries the cell's state
        _on_policy(
            "ppo_lstm", f"{_RECURRENT_CONFIG}:RecurrentPPOConfig",
            _agents("ppo_lstm", "TorchRecurrentPPO", "TFRecurrentPPO"), "recurrent_actor_critic",
            recurrent=True, builds_on=("ppo",),
        ),
        # ppo_lstm's network, rollout and export; A2C's update: one step per rollout, RMSprop
        _on_policy(
            "a2c_lstm", f"{_RECURRENT_CONFIG}:RecurrentA2CConfig",
            _agents("a2c_lstm", "TorchRecurrentA2C", "TFRecurrentA2C"), "recurrent_actor_critic",
            recurrent=True, builds_on=("ppo_lstm", "a2c"),
        ),
    )
}  # fmt: skip


def get(name: str, *, in_checkpoint: bool = False) -> Algo:
    """The row of `name`; a one-line error naming the choices (a CheckpointError for a checkpoint's)."""
    if name not in ALGOS:
        if in_checkpoint:
            raise CheckpointError(f"unknown algorithm {name!r} in the checkpoint")
        raise ConfigError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGOS)}")
    return ALGOS[name]


def build_config(
    env_id: str,
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    algo: str = "ppo",
) -> RunConfig:
    """The algorithm's defaults (SB3's), then its preset for env_id, then the config file, then the CLI."""
    from rl2edge.train.core.config import configure

    row = get(algo)
    return configure(row.config_class()(), env_id, row.preset_file(), config_file, overrides)


def check_env(algo: str, env_id: str) -> None:
    """The env can be made, and its action space and image keys suit the algorithm (a clear error before
    any work)."""
    from rl2edge.train.core.encoder_spec import encoder_spec, refuse_image_keys
    from rl2edge.train.core.envs import make_env
    from rl2edge.train.core.spaces import action_spec, network_view, observation_spec

    row = get(algo)
    env = make_env(env_id)
    try:
        spec = observation_spec(env.observation_space)  # a space rl2edge does not take: refused here
        encoder_spec(network_view(spec))  # an image too small for the Nature-CNN: refused here
        row.check_action_space(action_spec(env.action_space).kind, env_id)  # an unsupported space: refused
        if not row.image_keys:
            takes = [a.name for a in ALGOS.values() if a.image_keys]
            refuse_image_keys(spec, row.name, takes)
    finally:
        env.close()


def _by_framework(field: str) -> dict[str, dict[str, list[str]]]:
    """framework -> {the row's `field` text: the algorithms with that text}, in table order."""
    out: dict[str, dict[str, list[str]]] = {f: {} for f in FRAMEWORKS}
    for a in ALGOS.values():
        for framework, text in getattr(a, field).items():
            out[framework].setdefault(text, []).append(a.label)
    return out


def compile_help() -> str:
    """What --compile compiles, per framework and algorithm, from the rows (the CLI's help)."""
    return "; ".join(
        f"{framework} {'/'.join(names)}: {what}"
        for framework, texts in _by_framework("compiled").items()
        for what, names in texts.items()
    )


def on_policy_names() -> list[str]:
    return [a.label for a in ALGOS.values() if a.on_policy]


def rollout_worker_names() -> list[str]:
    """The algorithms --rollout-workers applies to: on-policy, not recurrent (a recurrent run keeps each
    env's state with the learner and collects in one process)."""
    return [a.label for a in ALGOS.values() if _spreads_rollouts(a)]


def _spreads_rollouts(a: Any) -> bool:
    return bool(a.on_policy and not a.recurrent)


def check_compile(algo: str, framework: str) -> None:
    """--compile suits this run: an agent whose update has a compiled form behind the flag."""
    row = get(algo)
    if framework in row.compile_notes:
        raise ConfigError(f"--compile: {row.compile_notes[framework]}")
    if framework not in row.compiled:
        raise ConfigError(
            f"--compile: {row.label}'s {framework} update has no compiled form yet; it is there for "
            + "; ".join(
                f"{f} {_either(n for names in texts.values() for n in names)}"
                for f, texts in _by_framework("compiled").items()
            )
        )


MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision's names


def check_matmul_precision(precision: str, framework: str) -> None:
    """--matmul-precision suits this run: one of torch's names, and torch (TF has its own switches)."""
    if precision not in MATMUL_PRECISIONS:
        raise ConfigError(f"--matmul-precision {precision!r}: choose {_either(MATMUL_PRECISIONS)}")
    if framework != "torch" and precision != "highest":
        raise ConfigError(
            "--matmul-precision sets torch's float32 matmul precision; TensorFlow has its own switches "
            "(TF32 on Ampere GPUs is on by default there; oneDNN's bfloat16 mode on a CPU comes from the "
            "TF_SET_ONEDNN_FPMATH_MODE environment variable), which rl2edge neither sets nor has tested"
        )


def check_rollout_workers(cfg: RunConfig, workers: int) -> None:
    """--rollout-workers suits this run: an on-policy algorithm, and no more workers than envs."""
    spread = _either(a.name for a in ALGOS.values() if _spreads_rollouts(a))
    if not get(cfg.algo).on_policy:
        raise ConfigError(f"--rollout-workers spreads on-policy rollouts: {spread} only")
    if get(cfg.algo).recurrent:
        raise ConfigError(
            f"--rollout-workers: {cfg.algo} collects its rollouts in one process (each env's recurrent state "
            f"stays with the learner); use it with {spread}"
        )
    if workers > cfg.n_envs:
        raise ConfigError(
            f"--rollout-workers {workers} is more than the {cfg.n_envs} envs of the run (n_envs); "
            f"use at most {cfg.n_envs} workers or raise n_envs"
        )


def check_data_parallel(cfg: RunConfig, framework: str, world: int) -> None:
    """`train --nproc` (or a torchrun job) suits this run: torch, an on-policy algorithm, and a share of
    the envs and of every minibatch for each process (train.data_parallel.sharding)."""
    names = _either(on_policy_names())  # every on-policy one, recurrent included
    if not get(cfg.algo).on_policy:
        raise ConfigError(
            f"--nproc runs a data-parallel learner for {names}; {cfg.algo} learns from a replay buffer in one "
            "process (use --seeds to use more processes)"
        )
    if framework != "torch":
        raise ConfigError(
            "--nproc is built on torch.distributed: use --framework torch (TensorFlow's counterpart, "
            "tf.distribute.MirroredStrategy, is not wired in: docs/ray.md)"
        )
    from rl2edge.train.data_parallel.sharding import check_shardable

    check_shardable(cfg, world)


def per_process(cfg: RunConfig, world: int) -> RunConfig:
    """`train --per-process`: the config's n_envs, n_timesteps and batch_size are each process's (rsl-rl's
    and CleanRL's convention); the job's are `world` times as many."""
    assert isinstance(cfg, OnPolicyConfig)  # check_data_parallel refuses the others
    scaled: dict[str, Any] = {"n_envs": cfg.n_envs * world, "n_timesteps": cfg.n_timesteps * world}
    if "batch_size" in {f.name for f in dataclasses.fields(cfg)}:
        scaled["batch_size"] = int(getattr(cfg, "batch_size")) * world  # noqa: B009  (PPO's field, not A2C's)
    return dataclasses.replace(cfg, **scaled)


def _load(path: str) -> Any:
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def train(
    framework: str,
    env_id: str,
    cfg: RunConfig,
    seed: int,
    run_dir: Path,
    device: str = "auto",
    progress: bool | None = None,
    agent_out: list[Any] | None = None,
    rollout_workers: int = 0,
    on_evaluation: Callable[[int, EvalResult], bool] | None = None,
    threads: int = 1,
    compile_update: bool = False,
    matmul_precision: str = "highest",
    data_parallel: bool = False,
) -> TrainResult:
    """Train cfg.algo with `framework`'s agent: the one entry point of the CLI, the tests and the
    benchmarks. `agent_out`, when given, receives the agent (tests read its state and trace counts).
    `rollout_workers` > 0 (PPO, A2C) collects the rollouts on that many Ray actors, in a Ray session the
    caller has started (train.distributed.cluster.ray_session). `on_evaluation(step, result)` is called
    after each periodic evaluation; False stops the run there (it still finishes: checkpoint, summary).
    `threads`: CPU threads per op for the framework (train.core.threads). `compile_update`: torch PPO/A2C
    run their forward pass and loss as one torch.compile graph (TorchPPO.compile_update), torch SAC and
    TD3/DDPG their gradient step (TorchOffPolicyBase.compile_update), TF's off-policy agents their
    training phase as one XLA computation (TFOffPolicyBase.compile_update). `matmul_precision`: torch's
    float32 matmul precision in the run's training phases (train.torch_backend.matmul_precision).
    `data_parallel`: this process is one rank of the job torchrun's variables describe (train.data_parallel):
    it steps its share of the envs and of each minibatch; rank 0 writes `run_dir`."""
    set_cpu_threads(threads)
    check_matmul_precision(matmul_precision, framework)
    algo = get(cfg.algo)
    check_env(cfg.algo, env_id)
    if compile_update:
        check_compile(cfg.algo, framework)
    extra: dict[str, Any] = {}
    if rollout_workers:
        check_rollout_workers(cfg, rollout_workers)
        assert isinstance(cfg, OnPolicyConfig)  # check_rollout_workers refuses the others
        if cfg.norm_obs_update != "rollout":
            _logger.info(
                "--rollout-workers: normalization statistics move once per rollout (norm_obs_update: rollout)"
            )
            cfg = dataclasses.replace(cfg, norm_obs_update="rollout")
        from rl2edge.train.distributed.rollout_workers import RayRolloutPool

        extra["make_pool"] = functools.partial(RayRolloutPool, rollout_workers)
    if on_evaluation is not None:
        extra["on_evaluation"] = on_evaluation
    replicas = None
    if data_parallel:
        from rl2edge.train.data_parallel.group import Replicas
        from rl2edge.train.data_parallel.sharding import ShardedAgent

        if rollout_workers:
            raise ConfigError("--nproc and --rollout-workers do not combine; use one of them")
        assert isinstance(cfg, OnPolicyConfig)
        if cfg.norm_obs_update != "rollout":  # every process's observations are known after the rollout only
            _logger.info(
                "a data-parallel job: normalization statistics move once per rollout (norm_obs_update: rollout)"
            )
            cfg = dataclasses.replace(cfg, norm_obs_update="rollout")
        replicas = Replicas.join(device)
        check_data_parallel(cfg, framework, replicas.world)
        device = replicas.torch_device
        extra["replicas"] = replicas
    cls = algo.agent_class(framework)

    def make_agent(network: NetworkSpec, cfg: RunConfig, seed: int, device: str) -> Any:
        agent = cls(network, cfg, seed, device)
        if framework == "torch":
            agent.matmul_precision = matmul_precision
        if compile_update:
            agent.compile_update()
        if agent_out is not None:
            agent_out.append(agent)
        return agent if replicas is None else ShardedAgent(agent, replicas)

    if matmul_precision != "highest":
        _logger.info("torch float32 matmul precision of the training phases: %s", matmul_precision)
    driver = _load(algo.driver)
    try:
        return driver(
            env_id, cfg, seed, run_dir, make_agent, algo.network, device=device, progress=progress, **extra
        )
    except RuntimeError as exc:  # a bug stays a traceback; only a peer gone becomes one line
        if replicas is None or not replicas.lost_peer(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainingError(
            f"rank {replicas.rank} of {replicas.world}: a collective failed ({first}); another process of "
            "the job has stopped or died"
        ) from exc
    finally:
        if replicas is not None:
            replicas.close()
