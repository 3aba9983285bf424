"""On-policy data collection for a slice of the envs: the part of PPO's (and A2C's) rollout that one process
runs, whether that process is the learner (all envs) or a Ray rollout worker (its share).

What makes a split of the envs over workers give the learner the very same rollout as one process:
- each env's sampling noise comes from its own generator, keyed by (seed, env index), never from a
  framework's global generator whose draws depend on the batch size;
- every forward pass runs on one BLAS thread (OpenBLAS splits a matmul differently on 2 threads, and
  the last bits change with it), on a batch of the run's full n_envs rows, each env at its own row (a
  share sits among zero rows): CPU matmul kernels are chosen by the row count, and a 2-row batch rounds
  differently from an 8-row one in the last bit (measured: 1e-9 in the logits, 5e-7 in the weights after
  8 PPO updates); within a row count, the edge rows of a kernel's row block take another accumulation
  order (6e-8 after a few updates). With both fixed, a row's result does not depend on the other rows;
- env i is reset with seed + i, as one vector env of all the envs would be;
- rewards come back raw; reward scaling and the truncation bootstrap are applied by the learner, in step
  order over all envs (train.core.onpolicy_driver.assemble);
- with `norm_obs_update: rollout` the acting uses the normalization statistics frozen at the rollout's
  start, and the learner updates them afterwards with every step's observations in step order. Per-step
  statistics (`step`, SB3's VecNormalize) need every env's observation before each step: one process only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rl2edge.train.core.envs import make_vec_env
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.numpy_policy import NumpyActorCritic, RolloutWeights
from rl2edge.train.core.threads import one_blas_thread

_NOISE_KEY = 0xAC7  # separates the action noise streams from every other use of the run's seed


class PerEnvNoise:
    """Sampling noise for the envs `indices`, one generator per env: Gumbel noise for discrete actions
    (argmax(logits + g) is a sample of softmax(logits)), standard normal for Gaussian ones."""

    def __init__(self, seed: int, indices: range, width: int, discrete: bool):
        self.gens = [
            np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_NOISE_KEY, i))) for i in indices
        ]
        self.width, self.discrete = width, discrete

    def draw(self, n_steps: int) -> np.ndarray:
        """[n_steps, m, width]: each env's next n_steps draws in one call. A generator's values come in the
        same sequence whether drawn one step at a time or n at once, so the split does not change them."""
        out = np.empty((n_steps, len(self.gens), self.width), np.float32)
        for i, gen in enumerate(self.gens):
            size = (n_steps, self.width)
            out[:, i] = gen.gumbel(size=size) if self.discrete else gen.standard_normal(size)
        return out


@dataclass
class Segment:
    """n_steps of a slice of m envs, as collected; [T, m, ...] arrays."""

    obs: np.ndarray  # float32, normalized as acted on
    actions: np.ndarray
    logprobs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray  # float64, raw
    dones: np.ndarray  # bool
    boot_mask: np.ndarray  # bool: truncated and not terminated
    boot_values: np.ndarray  # float32: gamma * V(final obs) where boot_mask, else 0
    last_values: np.ndarray  # float32 [m]: V(obs after the last step)
    raw_obs: np.ndarray | None  # the raw observation after each step (for the learner's statistics), or None
    episodes: list[tuple[int, int, float]] = field(default_factory=list)  # (t, env index, return)
    starts: np.ndarray | None = None  # bool [T, m]: obs[t] is its episode's first
    init_state: Any = None  # a recurrent policy's states before each step (RecurrentCollector)

    @staticmethod
    def concat(parts: list[Segment]) -> Segment:
        """The segments of consecutive env slices as one over all the envs (env axis 1)."""
        cat = lambda name: np.concatenate([getattr(p, name) for p in parts], axis=1)  # noqa: E731
        names = ("obs", "actions", "logprobs", "values", "rewards", "dones", "boot_mask", "boot_values")
        raw = None if parts[0].raw_obs is None else cat("raw_obs")
        last = np.concatenate([p.last_values for p in parts])
        episodes = sorted(e for p in parts for e in p.episodes)  # single-process order: step, then env
        starts = None if parts[0].starts is None else cat("starts")
        trace = None if parts[0].init_state is None else _concat_traces([p.init_state for p in parts])
        return Segment(
            **{n: cat(n) for n in names},
            last_values=last,
            raw_obs=raw,
            episodes=episodes,
            starts=starts,
            init_state=trace,
        )


def _concat_traces(traces: list[Any]) -> list[Any]:
    """Recurrent collectors' state traces (per step: the actor's state parts [L, m, H], the critic's or None)
    of consecutive env slices as one trace over all the envs."""
    cat = lambda states: tuple(np.concatenate(parts, axis=1) for parts in zip(*states, strict=True))  # noqa: E731
    out = []
    for steps in zip(*traces, strict=True):
        critic = None if steps[0][1] is None else cat([s[1] for s in steps])
        out.append((cat([s[0] for s in steps]), critic))
    return out


def share_bounds(size: int, parts: int, index: int) -> tuple[int, int]:
    """[lo, hi) of part `index` of `size` items cut into `parts` contiguous parts whose sizes differ by at
    most one (the first size % parts take one more): a Ray rollout worker's or a data-parallel rank's envs,
    a rank's share of a minibatch."""
    base, extra = divmod(size, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


class RolloutCollector:
    """Steps envs `first .. first + count - 1` of a run with the weights each rollout is given (the agent's
    `rollout_weights()`, acted with through train.core.numpy_policy: no framework needed here) on
    observations normalized by `norm`; `to_env` maps the actions to the env's units. `live_norm`: update `norm` after
    every step (one process, SB3's per-step statistics); else leave it alone and return the raw
    observations for the learner to update its statistics with."""

    def __init__(
        self,
        env_id: str,
        first: int,
        count: int,
        seed: int,
        gamma: float,
        network: NetworkSpec,
        norm: RunningNormalizer,
        live_norm: bool,
        to_env: Callable[[np.ndarray], np.ndarray],
        pad_to: int,
        envs: Any = None,
    ):
        self.envs = envs if envs is not None else make_vec_env(env_id, count, network.frame_stack)
        self.first, self.count, self.gamma32, self.pad_to = first, count, np.float32(gamma), pad_to
        self.norm, self.live_norm, self.to_env = norm, live_norm, to_env
        self.policy: Any = self.make_policy(network)
        self.noise = PerEnvNoise(seed, range(first, first + count), network.act_dim, network.is_discrete)
        self.ep_returns = np.zeros(count)
        self.raw_obs, _ = self.envs.reset(seed=seed + first)  # env j of the slice: seed + first + j
        self.starts = np.ones(count, bool)  # each env's next observation is its episode's first

    @staticmethod
    def make_policy(network: NetworkSpec) -> Any:
        return NumpyActorCritic(network)

    def collect(self, n_steps: int, weights: RolloutWeights) -> Segment:
        self.policy.load(weights)
        with one_blas_thread():
            return self._collect(n_steps)

    def _collect(self, n_steps: int) -> Segment:
        m, norm = self.count, self.norm
        lists: tuple[list[np.ndarray], ...] = tuple([] for _ in range(10))
        obs_l, act_l, logp_l, val_l, rew_l, done_l, bm_l, bv_l, raw_l, start_l = lists
        episodes: list[tuple[int, int, float]] = []
        noise = self.noise.draw(n_steps)
        init_state = self._begin()
        for t in range(n_steps):
            obs = norm.normalize(self.raw_obs)
            start_l.append(self.starts)
            action, logp, value = self._act(obs, noise[t])
            raw_obs, reward, terminated, truncated, info = self.envs.step(self.to_env(action))
            self.ep_returns += reward
            # CRUCIAL: a time-limit truncation is not a terminal state; the learner bootstraps it with
            # gamma * V(final obs), which only this process can compute (it holds the final obs).
            boot = truncated & ~terminated
            boot_values = np.zeros(m, np.float32)
            if boot.any():  # the final observations at their envs' own rows, as every forward pass
                final = np.zeros_like(self.raw_obs)
                for i in np.flatnonzero(boot):
                    final[i] = info["final_obs"][i]
                values = self._final_values(norm.normalize(final))
                boot_values[boot] = self.gamma32 * values[boot]
            done = terminated | truncated
            self.starts = done
            for i in np.flatnonzero(done):
                episodes.append((t, self.first + int(i), float(self.ep_returns[i])))
                self.ep_returns[i] = 0.0
            if self.live_norm:
                norm.update(raw_obs)
            else:
                raw_l.append(raw_obs)
            self.raw_obs = raw_obs
            for lst, x in zip(
                (obs_l, act_l, logp_l, val_l, rew_l, done_l, bm_l, bv_l),
                (obs, action, logp, value, reward, done, boot, boot_values),
                strict=True,
            ):
                lst.append(x)
        last_values = self._next_values(norm.normalize(self.raw_obs)).astype(np.float32)
        return Segment(
            np.stack(obs_l),
            np.stack(act_l),
            np.stack(logp_l),
            np.stack(val_l),
            np.stack(rew_l),
            np.stack(done_l),
            np.stack(bm_l),
            np.stack(bv_l),
            last_values,
            None if self.live_norm else np.stack(raw_l),
            episodes,
            np.stack(start_l),
            init_state,
        )

    # What a step asks of the policy; RecurrentCollector (train.core.recurrent_rollout) carries state here.
    def _begin(self) -> Any:
        """At a rollout's start: what the learner needs to replay it (a stateless policy: nothing)."""
        return None

    def _act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._padded(self.policy.act, obs, noise)

    def _final_values(self, final_obs: np.ndarray) -> np.ndarray:
        """V of truncated episodes' final observations (rows of other envs: zeros, ignored)."""
        return self._padded(self.policy.value, final_obs)

    def _next_values(self, obs: np.ndarray) -> np.ndarray:
        """V of the observations after the rollout's last step."""
        return self._padded(self.policy.value, obs)

    def _padded(self, fn: Callable[..., Any], *arrays: np.ndarray) -> Any:
        """fn on the slice's rows placed at their envs' own rows (first ..) of pad_to zero rows, cut back.
        Same row count and same row position: BLAS kernels take rows in blocks and give a block's edge rows
        another accumulation order (OpenBLAS, 3 rows: env 2 as row 0 of 3 differs from env 2 as row 2)."""
        n = arrays[0].shape[0]
        if n == self.pad_to:
            return fn(*arrays)
        rows = slice(self.first, self.first + n)
        pad = []
        for a in arrays:
            full = np.zeros((self.pad_to, *a.shape[1:]), a.dtype)
            full[rows] = a
            pad.append(full)
        out = fn(*pad)
        return tuple(o[rows] for o in out) if isinstance(out, tuple) else out[rows]

    def close(self) -> None:
        self.envs.close()
