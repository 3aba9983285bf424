"""Recurrent PPO's and A2C's configuration: sb3-contrib's RecurrentPPO names and defaults (its
MlpLstmPolicy's policy_kwargs as flat fields, as the Zoo's ppo_lstm files give them in policy_kwargs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rl2edge.errors import ConfigError
from rl2edge.specs import RNN_KINDS
from rl2edge.train.core.config import A2CConfig, PPOConfig
from rl2edge.train.core.schedules import Schedule

RECURRENT_JSON = ("rnn_type", "lstm_hidden_size", "n_lstm_layers", "shared_lstm", "enable_critic_lstm")


@dataclass
class LSTMFields:
    """The recurrent cell (an LSTM or a GRU) of a recurrent actor-critic, sb3-contrib's MlpLstmPolicy's
    policy_kwargs as flat fields (the
    Zoo's names). `policy` is set by each algorithm's config: RunConfig's own default would win here."""

    rnn_type: str = "lstm"
    """The recurrent cell: lstm (sb3-contrib's), or gru (one state tensor per layer instead of two; the
    lstm_* sizes and flags below apply to it as they are named)."""
    lstm_hidden_size: int = 256
    """Width of each recurrent layer's hidden (and an LSTM's cell) state."""
    n_lstm_layers: int = 1
    """Stacked recurrent layers."""
    shared_lstm: bool = False
    """The critic reads the actor's LSTM output (its gradient stopped), as sb3-contrib's shared_lstm."""
    enable_critic_lstm: bool = True
    """The critic has an LSTM of its own; with neither this nor shared_lstm, a Linear layer stands in."""

    def network_fields(self) -> dict[str, Any]:
        """The checkpoint network's fields beyond the MLP's: the recurrent cells (sb3-contrib's names)."""
        return {
            "rnn": self.rnn_type,
            "lstm_biases": 2,  # per layer, b_ih and b_hh, as torch's nn.LSTM/GRU (TF LSTM checkpoints before: 1)
            "lstm_hidden_size": int(self.lstm_hidden_size),
            "n_lstm_layers": int(self.n_lstm_layers),
            "shared_lstm": bool(self.shared_lstm),
            "enable_critic_lstm": bool(self.enable_critic_lstm),
        }

    def validate_recurrent(self, validate_rest: Callable[[], None]) -> None:
        """The recurrent cell's checks around `validate_rest` (RunConfig's, which knows MlpPolicy only)."""
        host: Any = self  # a RunConfig, whose algo, policy and frame_stack these checks read
        algo, policy = host.algo, host.policy
        if self.rnn_type not in RNN_KINDS:
            raise ConfigError(f"rnn_type {self.rnn_type!r}: choose one of {', '.join(RNN_KINDS)}")
        if policy not in ("MlpLstmPolicy", "MultiInputLstmPolicy"):
            raise ConfigError(
                f"policy {policy!r}: {algo} trains MlpLstmPolicy (or MultiInputLstmPolicy for a Dict "
                "observation); CnnLstmPolicy is not implemented"
            )
        host.policy = "MlpPolicy"
        try:
            validate_rest()
        finally:
            host.policy = policy
        if host.frame_stack > 1:
            raise ConfigError(
                f"frame_stack {host.frame_stack} with {algo}: the recurrent cell is the policy's memory; choose one"
            )
        if self.shared_lstm and self.enable_critic_lstm:
            raise ConfigError(
                "shared_lstm and enable_critic_lstm are both true: choose a shared LSTM, a separate one for "
                "the critic, or none (set enable_critic_lstm: false with shared_lstm: true)"
            )
        for name in ("lstm_hidden_size", "n_lstm_layers"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")


@dataclass
class RecurrentPPOConfig(LSTMFields, PPOConfig):
    """PPO with an LSTM (or a GRU) in front of the actor's MLP (and, by default, another in front of the
    critic's).

    Minibatches are consecutive steps: `batch_size` counts steps; n_steps times a divisor of n_envs gives
    whole env sequences, a divisor of n_steps chunks of one env's sequence, each replayed from the state
    recorded at its first step with the episode starts inside it as masks. sb3-contrib cuts sequences at
    episode starts and pads them instead; both give every step the state the rollout acted with."""

    algo = "ppo_lstm"
    json_order = (*PPOConfig.json_order, *RECURRENT_JSON)
    n_steps: int = 128
    """Steps per env per rollout (sb3-contrib's default)."""
    batch_size: int = 128
    """Steps per minibatch: n_steps times a divisor of n_envs (whole env sequences), or a divisor of n_steps
    (chunks of one env's sequence)."""
    learning_rate: Schedule = field(default_factory=lambda: Schedule(3e-4))
    """Step size; 'lin_X' anneals linearly to 0."""
    policy: str = "MlpLstmPolicy"
    """The Zoo's name: MlpLstmPolicy (MultiInputLstmPolicy for a Dict of vector keys)."""

    def validate(self) -> None:
        self.validate_recurrent(super().validate)
        whole = self.batch_size >= self.n_steps
        if (
            whole and (self.batch_size % self.n_steps or self.n_envs % (self.batch_size // self.n_steps))
        ) or (not whole and self.n_steps % self.batch_size):
            raise ConfigError(
                f"batch_size {self.batch_size} must divide n_steps ({self.n_steps}: chunks of one env's sequence) "
                f"or be n_steps times a divisor of n_envs ({self.n_envs}: whole env sequences); recurrent "
                f"minibatches replay consecutive steps. For example batch_size: {self.n_steps * max(1, self.n_envs // 2)}"
            )


@dataclass
class RecurrentA2CConfig(LSTMFields, A2CConfig):
    """A2C with an LSTM or a GRU (sb3-contrib has no recurrent A2C: RecurrentPPO's network and rollout, A2C's update):
    one gradient step per rollout on all envs' whole sequences, each replayed from the state recorded at
    its first step, RMSprop as A2C."""

    algo = "a2c_lstm"
    json_order = (*A2CConfig.json_order, *RECURRENT_JSON)
    policy: str = "MlpLstmPolicy"
    """The Zoo's name: MlpLstmPolicy (MultiInputLstmPolicy for a Dict of vector keys)."""

    def validate(self) -> None:
        self.validate_recurrent(super().validate)
