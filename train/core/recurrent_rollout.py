"""The recurrent actor-critics' (ppo_lstm's and a2c_lstm's, LSTM or GRU) rollout and minibatches, framework-free: the recurrent (LSTM or GRU) actor-critic in numpy (what the rollout
and the periodic evaluation act with, as train.core.numpy_policy for plain PPO), the collector that carries
each env's state and records where episodes start, and the buffer that cuts the rollout into whole env
sequences for the update.

The state contract is sb3-contrib's: before a step, each env's state is multiplied by (1 - episode_start),
so an episode's first observation meets a zero state; the update replays every sequence from the state
the rollout began with, masked at the same places, so each step sees the state it was acted on with
(up to the numpy vs framework rounding that plain PPO's rollout has too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.numpy_policy import LOG_2PI, Layers, argmax_heads, sample_categorical
from rl2edge.train.core.rnn_cells import RNNLayer, RNNState, rnn_step, zero_state
from rl2edge.train.core.rollout import RolloutBuffer
from rl2edge.train.core.rollout_collector import RolloutCollector


@dataclass
class RecurrentWeights:
    """A recurrent actor-critic's weights as numpy arrays, kernels [in, out]."""

    actor_lstm: list[RNNLayer]  # the network's "rnn": LSTM or GRU layers (train.core.rnn_cells)
    critic_lstm: list[RNNLayer] | None  # enable_critic_lstm
    critic_linear: tuple[np.ndarray, np.ndarray] | None  # neither a critic LSTM nor shared_lstm
    actor: Layers
    critic: Layers
    log_std: np.ndarray | None


@dataclass(frozen=True)
class SequenceMinibatch:
    """Whole env sequences: [T, E, ...] arrays, the state each env began the rollout with, the starts."""

    obs: np.ndarray  # float32 [T, E, obs_dim], normalized
    actions: np.ndarray  # int64 [T, E] or float32 [T, E, act_dim]
    old_logprobs: np.ndarray  # float32 [T, E]
    old_values: np.ndarray  # float32 [T, E]
    advantages: np.ndarray  # float32 [T, E], normalized over the minibatch when asked
    returns: np.ndarray  # float32 [T, E]
    starts: np.ndarray  # float32 [T, E]: 1 where obs[t] is its episode's first
    actor_state: RNNState  # [L, E, H] each: an LSTM's (h, c), a GRU's (h,)
    critic_state: RNNState | None


class NumpyRecurrentActorCritic:
    """Samples the recurrent policy as NumpyActorCritic samples PPO's, carrying each row's RNN state."""

    def __init__(self, network: NetworkSpec):
        if network.activation not in ("tanh", "relu"):
            raise ValueError(f"no numpy form of activation {network.activation!r}")
        self.discrete, self.nvec = network.is_discrete, network.action_nvec
        self._tanh = network.activation == "tanh"
        self.shared = bool(network.required("shared_lstm"))
        self.layers, self.hidden = (
            int(network.required("n_lstm_layers")),
            int(network.required("lstm_hidden_size")),
        )
        self.kind = network.rnn_kind
        self._w: RecurrentWeights | None = None
        self.actor_state: RNNState | None = None
        self.critic_state: RNNState | None = None

    def zero_state(self, rows: int) -> RNNState:
        return zero_state(self.kind, self.layers, rows, self.hidden)

    def load(self, weights: RecurrentWeights) -> None:
        f32 = lambda a: np.array(a, np.float32, order="C")  # noqa: E731 (a copy: the framework's may move)
        lstm = lambda ls: None if ls is None else [tuple(f32(a) for a in layer) for layer in ls]  # noqa: E731
        self._w = RecurrentWeights(
            lstm(weights.actor_lstm),  # type: ignore[arg-type]
            lstm(weights.critic_lstm),  # type: ignore[arg-type]  # 4-tuples, as given
            None
            if weights.critic_linear is None
            else (f32(weights.critic_linear[0]), f32(weights.critic_linear[1])),
            [(f32(k), f32(b)) for k, b in weights.actor],
            [(f32(k), f32(b)) for k, b in weights.critic],
            None if weights.log_std is None else f32(weights.log_std),
        )
        if self._w.log_std is not None:
            self._std = np.exp(self._w.log_std)
            self._logp_const = np.float32(-self._w.log_std.sum() - 0.5 * LOG_2PI * self._w.log_std.size)

    def reset(self, rows: int) -> None:
        """Every row at the start of an episode (a zero state)."""
        self.actor_state, self.critic_state = self.zero_state(rows), self.zero_state(rows)

    def _mlp(self, layers: Layers, x: np.ndarray) -> np.ndarray:
        last = len(layers) - 1
        for i, (kernel, bias) in enumerate(layers):
            x = x @ kernel + bias
            if i < last:
                x = np.tanh(x) if self._tanh else np.maximum(x, 0.0)
        return x

    @staticmethod
    def _masked(state: RNNState, starts: np.ndarray) -> RNNState:
        keep = (~starts).astype(np.float32)[None, :, None]
        return tuple(s * keep for s in state)

    def _latents(self, obs: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, RNNState, Any, Any]:
        """The actor's and the critic's RNN outputs and their next states (the critic's None if it has none)."""
        w = self._w
        assert w is not None and self.actor_state is not None, "load() the weights and reset() first"
        latent_pi, pi_state = rnn_step(self.kind, w.actor_lstm, obs, self._masked(self.actor_state, starts))
        if w.critic_lstm is not None:
            assert self.critic_state is not None
            latent_vf, vf_state = rnn_step(
                self.kind, w.critic_lstm, obs, self._masked(self.critic_state, starts)
            )
        elif self.shared:
            latent_vf, vf_state = latent_pi, None
        else:
            assert w.critic_linear is not None
            latent_vf, vf_state = obs @ w.critic_linear[0] + w.critic_linear[1], None
        return latent_pi, pi_state, latent_vf, vf_state

    def act(
        self, obs: np.ndarray, starts: np.ndarray, noise: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, log-prob, value) per row, the state advanced; `starts` bool [rows]."""
        latent_pi, pi_state, latent_vf, vf_state = self._latents(obs, starts)
        w = self._w
        assert w is not None
        out = self._mlp(w.actor, latent_pi)
        if self.discrete:
            action, logp = sample_categorical(out, noise, self.nvec)
        else:
            action = (out + self._std * noise).astype(np.float32)
            logp = self._logp_const - 0.5 * np.einsum("ij,ij->i", noise, noise)
        value = self._mlp(w.critic, latent_vf)[:, 0]
        self.actor_state = pi_state
        if vf_state is not None:
            self.critic_state = vf_state
        return action, logp.astype(np.float32), value.astype(np.float32)

    def value(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """V of `obs` from the current state, the state left as it is (bootstrap values)."""
        _, _, latent_vf, _ = self._latents(obs, starts)
        assert self._w is not None
        return self._mlp(self._w.critic, latent_vf)[:, 0].astype(np.float32)

    def deterministic(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Argmax index or the Gaussian's mean, the actor's state advanced (evaluation)."""
        w = self._w
        assert w is not None and self.actor_state is not None
        latent_pi, self.actor_state = rnn_step(
            self.kind, w.actor_lstm, obs, self._masked(self.actor_state, starts)
        )
        out = self._mlp(w.actor, latent_pi)
        return argmax_heads(out, self.nvec) if self.discrete else out

    def state(self) -> tuple[RNNState, RNNState | None]:
        assert self.actor_state is not None
        critic = self.critic_state if self._w and self._w.critic_lstm else None
        return tuple(p.copy() for p in self.actor_state), None if critic is None else tuple(
            p.copy() for p in critic
        )


class StatefulEvaluator:
    """The deterministic policy for evaluate(): raw observation -> env action with the actor's RNN state
    carried, `reset()` at each episode's start (evaluate calls it)."""

    def __init__(
        self,
        agent: Any,
        norm: RunningNormalizer,
        to_env: Callable[[Any], Any],
        flatten: Callable[[Any], np.ndarray],
        network: NetworkSpec,
    ):
        self.policy = NumpyRecurrentActorCritic(network)
        self.policy.load(agent.rollout_weights())
        self.norm, self.to_env, self.flatten = norm, to_env, flatten
        self._start = np.ones(1, bool)

    def reset(self) -> None:
        self.policy.reset(1)
        self._start = np.ones(1, bool)

    def __call__(self, raw_obs: Any) -> Any:
        if self.policy.actor_state is None:
            self.reset()
        x = self.norm.normalize(self.flatten(raw_obs)[None]).astype(np.float32)
        out = self.policy.deterministic(x, self._start)
        self._start = np.zeros(1, bool)
        return self.to_env(out[0])


class RecurrentCollector(RolloutCollector):
    """RolloutCollector with each env's RNN state carried from step to step and rollout to rollout, reset
    (masked) at episode starts. One process: the rows are the envs, with no Ray split."""

    @staticmethod
    def make_policy(network: NetworkSpec) -> Any:
        return NumpyRecurrentActorCritic(network)

    def _begin(self) -> Any:
        """The states before each step of the rollout, a list this collector appends to as it steps (the
        Segment's `init_state`): the update replays a sequence from the state at its first step."""
        if self.policy.actor_state is None:
            self.policy.reset(self.count)
        self._trace: list[tuple[RNNState, RNNState | None]] = []
        return self._trace

    def _act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._trace.append(self.policy.state())  # before the step's mask: the replay applies it again
        return self.policy.act(obs, self.starts, noise)

    def _final_values(self, final_obs: np.ndarray) -> np.ndarray:
        # a truncated episode's final observation continues the episode: the state of its last step
        return self.policy.value(final_obs, np.zeros(self.count, bool))

    def _next_values(self, obs: np.ndarray) -> np.ndarray:
        return self.policy.value(obs, self.starts)


class SequenceBuffer(RolloutBuffer):
    """The rollout as [n_steps, n_envs] sequences, with each env's state before every step. Minibatches of
    `batch_size` steps: whole env sequences (batch_size / n_steps envs each) when batch_size >= n_steps,
    else chunks of batch_size consecutive steps of one env (sb3-contrib's minibatches are as small); each
    replayed from the state recorded at its first step."""

    starts: np.ndarray
    actor_states: RNNState
    """The actor's state before each step: [T, L, N, H] per part (an LSTM's h and c, a GRU's h)."""
    critic_states: RNNState | None
    """The critic's, as the actor's; None without a critic RNN."""

    def begin_segment(self, seg: Any) -> None:
        """The rollout's episode starts and the states each step was acted on from."""
        self.set_sequences(seg.starts, seg.init_state)

    def check_minibatch(self, mb: Any) -> None:
        """Whole sequences: [T, E, ...] arrays, float32 observations of the buffer's shape."""
        t, e = mb.advantages.shape
        if mb.obs.dtype != np.float32 or mb.obs.shape != (t, e, *self.obs_shape):
            raise ConfigError(
                f"sequence obs must be float32 [{t}, {e}, {', '.join(map(str, self.obs_shape))}], got "
                f"{mb.obs.dtype} {list(mb.obs.shape)}"
            )

    def set_sequences(self, starts: np.ndarray, trace: list[tuple[RNNState, RNNState | None]]) -> None:
        self.starts = starts.astype(np.float32)
        stack = lambda i: tuple(np.stack(parts) for parts in zip(*(step[i] for step in trace), strict=True))  # noqa: E731
        self.actor_states = stack(0)
        self.critic_states = stack(1) if trace[0][1] is not None else None

    def minibatches(  # type: ignore[override]
        self, batch_size: int, rng: np.random.Generator, normalize_advantage: bool
    ) -> Iterator[SequenceMinibatch]:
        """RecurrentPPOConfig checks that batch_size divides n_steps, or is n_steps times a divisor of n_envs."""
        if batch_size >= self.n_steps:
            per = batch_size // self.n_steps
            order = rng.permutation(self.n_envs)
            pieces = [(0, self.n_steps, np.sort(order[i : i + per])) for i in range(0, self.n_envs, per)]
        else:
            chunks = [(t, e) for e in range(self.n_envs) for t in range(0, self.n_steps, batch_size)]
            pieces = [
                (chunks[i][0], chunks[i][0] + batch_size, np.array([chunks[i][1]]))
                for i in rng.permutation(len(chunks))
            ]
        at_start = lambda parts, t, idx: tuple(p[t][:, idx] for p in parts)  # noqa: E731
        for t0, t1, idx in pieces:
            steps = slice(t0, t1)
            adv = self.advantages[steps, idx]
            if normalize_advantage and adv.size > 1:
                adv = ((adv - adv.mean()) / (adv.std() + np.float32(1e-8))).astype(np.float32)
            yield SequenceMinibatch(
                self.obs[steps, idx],
                self.actions[steps, idx],
                self.logprobs[steps, idx],
                self.values[steps, idx],
                adv,
                self.returns[steps, idx],
                self.starts[steps, idx],
                at_start(self.actor_states, t0, idx),
                None if self.critic_states is None else at_start(self.critic_states, t0, idx),
            )
