"""Off-policy configurations (SAC, TD3, DDPG, DQN): SB3's defaults and names, so that a Zoo
hyperparameter file means the same here. Presets per env are in train/presets/<algo>.yml."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, short_repr
from rl2edge.train.core.action_noise import GaussianNoise, OUNoise
from rl2edge.train.core.config import RunConfig
from rl2edge.train.core.her import HER_CLASS, her_options
from rl2edge.train.core.nstep import NStepCollector
from rl2edge.train.core.replay import PrioritizedReplayBuffer, ReplayBuffer, SharedObsReplayBuffer
from rl2edge.train.core.schedules import Schedule


@dataclass
class OffPolicyConfig(RunConfig):
    algo = "offpolicy"  # class attribute, not a hyperparameter
    json_order = (
        "n_timesteps", "n_envs", "learning_rate", "buffer_size", "learning_starts", "batch_size", "tau",
        "gamma", "train_freq", "gradient_steps", "net_arch", "activation", "normalize_obs", "norm_obs_clip",
        "eval_freq", "eval_episodes", "keep_best", "policy",
    )  # fmt: skip

    buffer_size: int = 1_000_000
    """Replay capacity in transitions (preallocated)."""
    learning_starts: int = 100
    """Env steps of uniformly random actions before the first gradient step."""
    batch_size: int = 256
    """Transitions per gradient step."""
    tau: float = 0.005
    """Polyak coefficient of the target networks: target <- tau * online + (1 - tau) * target."""
    train_freq: int = 1
    """Env steps (per env) between training phases."""
    gradient_steps: int = 1
    """Gradient steps per training phase; -1: as many as transitions collected since the last phase."""
    net_arch: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer sizes of actor and critics (or the Q-network)."""
    activation: str = "relu"
    """Hidden activation: relu or tanh."""
    normalize_obs: bool = True
    """Running observation normalization (applied when a batch is sampled, with the current statistics, as
    SB3's VecNormalize does); its frozen statistics are folded into the exported graph."""
    eval_freq: int = 5_000
    """Deterministic evaluation every this many env steps (0: off)."""
    replay_buffer_class: str | None = None
    """HerReplayBuffer: hindsight experience replay for goal-conditioned Dict plants (train.core.her);
    None: uniform replay. SB3's name."""
    replay_buffer_kwargs: dict[str, Any] = field(default_factory=dict)
    """HerReplayBuffer's n_sampled_goal (4) and goal_selection_strategy (future), SB3's names."""
    optimize_memory_usage: bool = False
    """Store each observation once (a transition's next observation is its env's next one): half the
    replay's observation memory, what camera frames need (train.core.replay.SharedObsReplayBuffer).
    Uniform replay only. SB3's name."""

    def validate(self) -> None:
        super().validate()
        if self.replay_buffer_class not in (None, HER_CLASS):
            raise ConfigError(
                f"replay_buffer_class {short_repr(self.replay_buffer_class)}: leave it out (uniform replay) or "
                f"give {HER_CLASS}"
            )
        if not isinstance(self.replay_buffer_kwargs, dict):
            raise ConfigError(
                f"replay_buffer_kwargs must be a mapping, got {short_repr(self.replay_buffer_kwargs)}"
            )
        if self.replay_buffer_class is None and self.replay_buffer_kwargs:
            raise ConfigError(
                f"replay_buffer_kwargs are {HER_CLASS}'s; give replay_buffer_class: {HER_CLASS}"
            )
        if self.replay_buffer_class == HER_CLASS:
            her_options(self.replay_buffer_kwargs)
        if not isinstance(self.optimize_memory_usage, bool):
            raise ConfigError(
                f"optimize_memory_usage must be true or false, got {short_repr(self.optimize_memory_usage)}"
            )
        if self.optimize_memory_usage and self.replay_buffer_class is not None:
            raise ConfigError(
                f"optimize_memory_usage stores each observation once in uniform replay; {HER_CLASS} relabels "
                "stored transitions with goals of its own: leave one of them out"
            )
        for name in ("buffer_size", "batch_size", "train_freq"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.learning_starts < 0:
            raise ConfigError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if self.gradient_steps == 0 or self.gradient_steps < -1:
            raise ConfigError(f"gradient_steps must be positive or -1, got {self.gradient_steps}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"tau must be in (0, 1], got {self.tau}")
        if not 0.0 < self.gamma <= 1.0:
            raise ConfigError(f"gamma must be in (0, 1], got {self.gamma}")
        if not self.net_arch or any(int(w) <= 0 for w in self.net_arch):
            raise ConfigError(f"net_arch must list positive layer widths, got {self.net_arch}")

    # What the driver builds from the config: the network's own fields, the replay, the n-step collector and
    # the exploration noise. The defaults are SAC's (and TD3's without noise).
    def network_fields(self) -> dict[str, Any]:
        """The checkpoint's network fields beyond the type, the sizes, net_arch and activation."""
        return {}

    def make_replay(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        pixels: np.ndarray | None = None,
    ) -> ReplayBuffer:
        if self.optimize_memory_usage:
            return SharedObsReplayBuffer(
                capacity, obs_shape, discrete, act_dim, int(self.n_envs), pixels=pixels
            )
        return ReplayBuffer(capacity, obs_shape, discrete, act_dim, pixels=pixels)

    def make_nstep(self, n_envs: int) -> NStepCollector | None:
        """The n-step return collector between the envs and the replay; None: one-step transitions."""
        return None

    def make_action_noise(
        self, act_dim: int, n_envs: int, rng: np.random.Generator
    ) -> GaussianNoise | OUNoise | None:
        """Noise added to the behaviour action (during warm-up too, as SB3), drawn from the run's `rng`."""
        return None


@dataclass
class SACConfig(OffPolicyConfig):
    algo = "sac"

    ent_coef: str | float = "auto"
    """Entropy temperature alpha: a number (fixed), 'auto' (learned, starting at 1) or 'auto_<init>'."""
    target_entropy: str | float = "auto"
    """Entropy target of the learned temperature; 'auto' is -dim(action)."""
    target_update_interval: int = 1
    """Gradient steps between polyak updates of the target critics."""

    def validate(self) -> None:
        super().validate()
        self.ent_coef_init()
        if self.target_update_interval <= 0:
            raise ConfigError(f"target_update_interval must be positive, got {self.target_update_interval}")
        if self.target_entropy != "auto":
            try:
                float(self.target_entropy)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"target_entropy must be 'auto' or a number, got {self.target_entropy!r}"
                ) from None

    def learns_ent_coef(self) -> bool:
        return isinstance(self.ent_coef, str) and self.ent_coef.startswith("auto")

    def ent_coef_init(self) -> float:
        """The temperature's initial value (fixed value when not learned)."""
        try:
            if self.learns_ent_coef():
                value = float(str(self.ent_coef)[5:]) if "_" in str(self.ent_coef) else 1.0
            else:
                value = float(self.ent_coef)
        except (TypeError, ValueError):
            raise ConfigError(
                f"ent_coef must be a number, 'auto' or 'auto_<init>', got {self.ent_coef!r}"
            ) from None
        if value <= 0:
            raise ConfigError(f"ent_coef must be positive, got {self.ent_coef!r}")
        return value

    def entropy_target(self, act_dim: int) -> float:
        return -float(act_dim) if self.target_entropy == "auto" else float(self.target_entropy)

    def network_fields(self) -> dict[str, Any]:
        return {"log_std_min": -20.0, "log_std_max": 2.0}


@dataclass
class TD3Config(OffPolicyConfig):
    algo = "td3"

    net_arch: list[int] = field(default_factory=lambda: [400, 300])
    """Hidden layer sizes of actor and critics (SB3's TD3 default)."""
    learning_starts: int = 100
    """Env steps of uniformly random actions before the first gradient step."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Std of the Gaussian smoothing noise on the target action (scaled units); 0 switches smoothing off."""
    target_noise_clip: float = 0.5
    """Clip of the target smoothing noise."""
    n_critics: int = 2
    """Critics; the target takes their minimum (clipped double Q)."""
    noise_type: str | None = None
    """Exploration noise while training: 'normal', 'ornstein-uhlenbeck' or None."""
    noise_std: float = 0.1
    """Std of the exploration noise (scaled units)."""

    def validate(self) -> None:
        super().validate()
        if self.policy_delay <= 0 or self.n_critics <= 0:
            raise ConfigError("policy_delay and n_critics must be positive integers")
        if self.noise_type not in (None, "normal", "ornstein-uhlenbeck"):
            raise ConfigError(
                f"noise_type must be normal, ornstein-uhlenbeck or null, got {self.noise_type!r}"
            )
        if self.target_policy_noise < 0 or self.target_noise_clip < 0 or self.noise_std < 0:
            raise ConfigError("target_policy_noise, target_noise_clip and noise_std must be >= 0")

    def network_fields(self) -> dict[str, Any]:
        return {"n_critics": int(self.n_critics)}

    def make_action_noise(
        self, act_dim: int, n_envs: int, rng: np.random.Generator
    ) -> GaussianNoise | OUNoise | None:
        if self.noise_type == "normal":
            return GaussianNoise(self.noise_std, act_dim, n_envs, rng)
        if self.noise_type == "ornstein-uhlenbeck":
            return OUNoise(0.15, self.noise_std, 1e-2, act_dim, n_envs, rng)  # SB3's theta and dt
        return None


@dataclass
class DDPGConfig(TD3Config):
    """DDPG is TD3 with its three additions switched off: one critic, no delay, no target smoothing."""

    algo = "ddpg"

    policy_delay: int = 1
    """Critic updates per actor update (1: DDPG)."""
    target_policy_noise: float = 0.0
    """Target smoothing noise (0: DDPG)."""
    n_critics: int = 1
    """Critics (1: DDPG)."""


@dataclass
class DQNConfig(OffPolicyConfig):
    algo = "dqn"

    learning_rate: Schedule = field(default_factory=lambda: Schedule(1e-4))
    """Adam step size; 'lin_X' anneals linearly to 0."""
    batch_size: int = 32
    """Transitions per gradient step."""
    tau: float = 1.0
    """Target update coefficient; 1 copies the online network."""
    train_freq: int = 4
    """Env steps (per env) between training phases."""
    target_update_interval: int = 10_000
    """Env steps between target network updates (SB3's unit)."""
    exploration_fraction: float = 0.1
    """Fraction of the run over which epsilon falls linearly from its initial to its final value."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the start."""
    exploration_final_eps: float = 0.05
    """Epsilon after exploration_fraction of the run."""
    max_grad_norm: float = 10.0
    """Global gradient norm clip."""
    double_q: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the Q-network."""

    def validate(self) -> None:
        super().validate()
        if self.target_update_interval <= 0:
            raise ConfigError(f"target_update_interval must be positive, got {self.target_update_interval}")
        for name in ("exploration_fraction", "exploration_initial_eps", "exploration_final_eps"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")

    def epsilon(self, step: int) -> float:
        """SB3's linear schedule over the first exploration_fraction of the run."""
        end = self.exploration_fraction * self.n_timesteps
        frac = 1.0 if end <= 0 else min(1.0, step / end)
        return self.exploration_initial_eps + frac * (
            self.exploration_final_eps - self.exploration_initial_eps
        )


@dataclass
class RainbowConfig(DQNConfig):
    """Rainbow (Hessel et al. 2018): DQN plus six components, each switchable here. With every switch off
    (double_q too) and n_step 1 this is DQN, step for step (a test holds it to that)."""

    algo = "rainbow"

    dueling: bool = True
    """Dueling heads: Q = V + A - mean_a A (per atom when distributional)."""
    prioritized: bool = True
    """Proportional prioritized replay on a sum tree."""
    per_alpha: float = 0.5
    """Priority exponent: P(i) ~ p_i^alpha (0: uniform)."""
    per_beta: float = 0.4
    """Initial importance-weight exponent, annealed linearly to 1 over the run."""
    per_eps: float = 1e-6
    """Added to |TD| (or the distributional loss) so no transition's priority is 0."""
    n_step: int = 3
    """Steps of the return; cut at termination, bootstrapped (gamma^k) at truncation."""
    distributional: bool = True
    """C51 head: a categorical return distribution over n_atoms fixed atoms in [v_min, v_max]."""
    n_atoms: int = 51
    """Atoms of the distribution."""
    v_min: float = -10.0
    """Smallest atom (the return's support; returns outside are clipped onto its ends)."""
    v_max: float = 10.0
    """Largest atom."""
    noisy: bool = True
    """Factorized-Gaussian noisy linear layers in the heads (exploration); exported with their mean weights."""
    noisy_sigma0: float = 0.5
    """Initial sigma scale of the noisy layers (sigma = sigma0 / sqrt(fan_in))."""
    exploration_initial_eps: float = 0.0
    """Epsilon at the start (0: the noisy layers explore)."""
    exploration_final_eps: float = 0.0
    """Epsilon after exploration_fraction of the run."""
    learning_starts: int = 1000
    """Env steps of uniformly random actions before the first gradient step."""

    def validate(self) -> None:
        super().validate()
        if self.replay_buffer_class is not None:
            raise ConfigError(
                f"Rainbow's replay is prioritized with n-step returns; {HER_CLASS} is for DQN, SAC, TD3 and DDPG"
            )
        if self.optimize_memory_usage:
            raise ConfigError(
                "optimize_memory_usage is for uniform one-step replay (DQN, SAC, TD3, DDPG); Rainbow's n-step "
                "transitions each carry an observation n steps on: leave it out"
            )
        if self.n_step < 1:
            raise ConfigError(f"n_step must be >= 1, got {self.n_step}")
        if self.distributional and (self.n_atoms < 2 or not self.v_min < self.v_max):
            raise ConfigError(
                f"the C51 head needs n_atoms >= 2 and v_min < v_max, got {self.n_atoms}, {self.v_min}, {self.v_max}"
            )
        if not 0.0 <= self.per_alpha <= 1.0 or not 0.0 <= self.per_beta <= 1.0 or self.per_eps <= 0:
            raise ConfigError("per_alpha and per_beta must be in [0, 1] and per_eps positive")
        if self.noisy_sigma0 < 0:
            raise ConfigError(f"noisy_sigma0 must be >= 0, got {self.noisy_sigma0}")

    def network_fields(self) -> dict[str, Any]:
        return {
            "dueling": bool(self.dueling),
            "noisy": bool(self.noisy),
            "noisy_sigma0": float(self.noisy_sigma0),
            "distributional": bool(self.distributional),
            "n_atoms": int(self.n_atoms) if self.distributional else 1,
            "v_min": float(self.v_min),
            "v_max": float(self.v_max),
        }

    def make_replay(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        discrete: bool,
        act_dim: int,
        pixels: np.ndarray | None = None,
    ) -> ReplayBuffer:
        if self.prioritized:
            return PrioritizedReplayBuffer(
                capacity, obs_shape, discrete, act_dim, self.per_alpha, self.per_eps, pixels=pixels
            )
        return ReplayBuffer(capacity, obs_shape, discrete, act_dim, with_discounts=True, pixels=pixels)

    def make_nstep(self, n_envs: int) -> NStepCollector | None:
        return NStepCollector(self.n_step, self.gamma, n_envs)

    def beta(self, step: int) -> float:
        """Importance-weight exponent: per_beta at the start, 1 at the end of the run."""
        frac = min(1.0, step / max(1, self.n_timesteps))
        return self.per_beta + frac * (1.0 - self.per_beta)
