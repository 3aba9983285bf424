"""Training configuration: defaults (SB3's), then the env's preset, then a user's config file, then the CLI.

PPO's and A2C's configs are here; the off-policy algorithms' are in train.core.offpolicy_config."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import yaml

from rl2edge.errors import ConfigError, short_repr
from rl2edge.fileio import load_yaml
from rl2edge.train.core.schedules import Schedule

if TYPE_CHECKING:  # importlib.resources.abc is 3.11's; the device's CPython 3.10 reads annotations as text
    from importlib.resources.abc import Traversable

_logger = logging.getLogger(__name__)


@dataclass
class RunConfig:
    """What every algorithm's run has (SB3's names): its length and envs, the learning rate and discount,
    the networks' shape, observation normalization, periodic evaluation. A subclass redeclares a field to
    change its default; train.core.run.TrainingRun reads these."""

    algo = "run"  # class attribute, not a hyperparameter
    json_order: ClassVar[tuple[str, ...]] = ()
    """checkpoint.json's order of the family's fields (as written before RunConfig existed: one seed, one
    checkpoint.json, byte for byte); fields not named follow in declaration order."""
    n_timesteps: int = 1_000_000
    """Total environment steps (all envs together); --steps overrides it."""
    n_envs: int = 1
    """Environments stepped together in one process."""
    learning_rate: Schedule = field(default_factory=lambda: Schedule(3e-4))
    """The optimizers' step size; 'lin_X' anneals linearly to 0."""
    gamma: float = 0.99
    """Discount factor."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of each network."""
    activation: str = "tanh"
    """Hidden activation: tanh or relu."""
    normalize_obs: bool = True
    """Running observation normalization; its frozen statistics are folded into the exported graph."""
    norm_obs_clip: float = 10.0
    """Clip of normalized observations."""
    eval_freq: int = 10_000
    """Deterministic evaluation every this many env steps (0: off)."""
    eval_episodes: int = 5
    """Episodes per periodic evaluation."""
    keep_best: bool = True
    """Checkpoint the policy (and its normalization statistics) of the best periodic evaluation rather than
    the last one; both evaluations are in summary.json."""
    frame_stack: int = 1
    """The Zoo's frame_stack: the policy sees its last K observations, oldest first, zeros before an
    episode's first (SB3's VecFrameStack); the exported graph keeps the K-1 previous ones as its state,
    so the PLC still sends one observation per cycle. Flat Box observations."""
    policy: str = "MlpPolicy"
    """The Zoo's name. MlpPolicy, or MultiInputPolicy for a Dict observation: the same network here, on
    the keys' values concatenated in the space's order, with a Nature-CNN per image key in front (SB3's
    CombinedExtractor; train.core.encoder_spec)."""

    def to_json(self) -> dict[str, Any]:
        return config_to_json(self)

    def validate(self) -> None:
        for name in ("n_timesteps", "n_envs"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.activation not in ("tanh", "relu"):
            raise ConfigError(f"activation must be tanh or relu, got {self.activation!r}")
        if not 1 <= int(self.frame_stack) <= 64:
            raise ConfigError(f"frame_stack must be from 1 (no stacking) to 64, got {self.frame_stack}")
        if self.policy not in ("MlpPolicy", "MultiInputPolicy"):
            raise ConfigError(
                f"policy {self.policy!r} is not implemented; use MlpPolicy (or MultiInputPolicy for Dict observations)"
            )


RunConfigT = TypeVar("RunConfigT", bound=RunConfig)


@dataclass
class OnPolicyConfig(RunConfig):
    """What PPO and A2C share (SB3's names); each sets its own defaults and adds its own fields."""

    algo = "onpolicy"  # class attribute, not a hyperparameter
    json_order: ClassVar[tuple[str, ...]] = (
        "n_timesteps", "n_envs", "n_steps", "gamma", "gae_lambda", "learning_rate", "ent_coef", "vf_coef",
        "max_grad_norm", "normalize_advantage", "net_arch", "activation", "log_std_init", "normalize_obs",
        "norm_obs_clip", "norm_obs_update", "normalize_reward", "eval_freq", "eval_episodes", "keep_best",
        "policy",
    )  # fmt: skip
    n_steps: int = 2048
    """Steps per env per rollout; a rollout holds n_envs * n_steps transitions."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    ent_coef: float = 0.0
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip."""
    normalize_advantage: bool = True
    """Normalize advantages per minibatch."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the (separate) actor and critic MLPs."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (Box actions)."""
    norm_obs_update: str = "step"
    """When the normalization statistics move: 'step' (after every vector step, as SB3's VecNormalize) or
    'rollout' (frozen while collecting, updated after it with every step's observations in order; what
    --rollout-workers runs, since per-step statistics need every env's observation before each step)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return (training only; the Zoo's normalize: true)."""
    keep_best: bool = True
    """Checkpoint the policy (and its normalization statistics) of the best periodic evaluation rather than
    the last update's; both evaluations are in summary.json. PPO can peak and then degrade late in a run."""

    def network_fields(self) -> dict[str, Any]:
        """The checkpoint network's fields beyond the MLP's (a recurrent cell's: train.core.recurrent_config)."""
        return {}

    def validate(self) -> None:
        if self.norm_obs_update not in ("step", "rollout"):
            raise ConfigError(f"norm_obs_update must be 'step' or 'rollout', got {self.norm_obs_update!r}")
        super().validate()
        for name in ("n_steps", "batch_size", "n_epochs"):
            value = getattr(self, name)
            if value is not None and int(value) <= 0:  # A2C: batch_size None, the whole rollout
                raise ConfigError(f"{name} must be a positive integer, got {value}")
        if not 0.0 < self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(
                f"gamma must be in (0, 1] and gae_lambda in [0, 1], got {self.gamma}, {self.gae_lambda}"
            )


@dataclass
class PPOConfig(OnPolicyConfig):
    algo = "ppo"
    batch_size: int = 64
    """Minibatch size of the update."""
    n_epochs: int = 10
    """Passes over each rollout."""
    clip_range: Schedule = field(default_factory=lambda: Schedule(0.2))
    """Clipping of the probability ratio in the surrogate; 'lin_X' anneals linearly to 0."""
    clip_range_vf: float | None = None
    """Clipping of the value update around the rollout's values; None turns value clipping off."""
    target_kl: float | None = None
    """Stop an update's epochs early when the approximate KL exceeds this."""


@dataclass
class A2CConfig(OnPolicyConfig):
    """A2C (Mnih et al. 2016) as SB3 runs it: synchronous envs, n_steps per env, one gradient step on the
    whole rollout, RMSprop. It trains through PPO's driver; the class attributes below are what that
    driver reads and A2C fixes."""

    algo = "a2c"  # class attributes, not hyperparameters:
    n_epochs = 1  # one pass over each rollout,
    batch_size = None  # as one batch (the mean over all n_envs * n_steps transitions),
    target_kl = None  # no early stop,
    clip_range = None  # and no clipped surrogate.
    RMSPROP_ALPHA = 0.99  # SB3's optimizer_kwargs for A2C; not a hyperparameter there either

    n_steps: int = 5
    """Steps per env per rollout; one gradient step per rollout."""
    gae_lambda: float = 1.0
    """GAE lambda; 1 is the classic n-step return."""
    learning_rate: Schedule = field(default_factory=lambda: Schedule(7e-4))
    """Step size; 'lin_X' anneals linearly to 0."""
    normalize_advantage: bool = False
    """Normalize advantages over the rollout."""
    use_rms_prop: bool = True
    """RMSprop (PyTorch's form: eps outside the square root, alpha 0.99) as SB3; False: Adam."""
    rms_prop_eps: float = 1e-5
    """RMSprop's epsilon."""

    def validate(self) -> None:
        super().validate()
        if self.rms_prop_eps <= 0:
            raise ConfigError(f"rms_prop_eps must be positive, got {self.rms_prop_eps}")


def config_to_json(cfg: RunConfig) -> dict[str, Any]:
    """A config dataclass as checkpoint.json records it (schedules in their Zoo notation), its keys in the
    family's `json_order`."""
    order = {name: i for i, name in enumerate(cfg.json_order)}
    fields = sorted(dataclasses.fields(cfg), key=lambda f: order.get(f.name, len(order)))  # stable
    return {f.name: (v.to_json() if isinstance(v := getattr(cfg, f.name), Schedule) else v) for f in fields}


def _apply(cfg: RunConfig, values: dict[str, Any], source: str) -> None:
    """Set hyperparameters on a config dataclass, typed by its field annotations (int, Schedule, ...)."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    algo = cfg.algo.upper()
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(
                f"{source}: unknown {algo} hyperparameter {short_repr(key)}; known: {', '.join(sorted(fields))}"
            )
        kind = str(fields[key].type)
        if kind == "Schedule":
            value = Schedule.parse(value, f"{source}: {key}")
        elif kind == "int":
            try:
                value = int(float(value))
            except (TypeError, ValueError):
                raise ConfigError(f"{source}: {key} must be an integer, got {short_repr(value)}") from None
        elif kind == "bool" and not isinstance(value, bool):  # "false" would be truthy
            raise ConfigError(f"{source}: {key} must be true or false, got {short_repr(value)}")
        elif kind in ("float", "float | None") and value is not None:
            try:  # YAML reads 1e-3 (no dot) as a string
                value = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"{source}: {key} must be a number, got {short_repr(value)}") from None
        setattr(cfg, key, value)


def load_preset(preset_file: Traversable, env_id: str) -> dict[str, Any]:
    """The hyperparameters of env_id in an algorithm's preset file (its row's, train.algos)."""
    presets = yaml.safe_load(preset_file.read_text()) or {}
    return dict(presets.get(env_id, {}))


def configure(
    cfg: RunConfigT,
    env_id: str,
    preset_file: Traversable,
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> RunConfigT:
    """On the algorithm's defaults (`cfg`), its preset for env_id, then the config file, then the CLI."""
    algo = cfg.algo
    preset = load_preset(preset_file, env_id)
    _apply(cfg, preset, f"preset {preset_file.name}[{env_id}]")
    if config_file is not None:
        path = Path(config_file)
        data = load_yaml(path, "config file")
        if isinstance(data, dict) and env_id in data and isinstance(data[env_id], dict):
            data = data[env_id]  # a Zoo-style file keyed by env id
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of hyperparameters")
        _apply(cfg, data, str(path))
    _apply(cfg, overrides or {}, "command line")
    cfg.validate()
    if not preset and config_file is None:  # a user's own env: say where the hyperparameters came from
        _logger.warning(
            "no %s preset for %s: %s's defaults (SB3's), %d steps; give your own with --config FILE and --steps",
            algo,
            env_id,
            algo,
            cfg.n_timesteps,
        )
    return cfg
