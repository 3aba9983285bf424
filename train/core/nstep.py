"""n-step transitions, per env, for replay (Rainbow; n = 1 gives DQN's one-step transitions).

A transition from step t holds R = r_t + gamma r_{t+1} + ... + gamma^(k-1) r_{t+k-1}, the observation after
its k-th step, whether that step terminated, and gamma^k: the target is R + (1 - terminated) gamma^k
max_a Q(s_{t+k}, a). k = n except where the episode ended earlier:
- termination cuts the sum there, and the transition does not bootstrap (the state after is terminal);
- truncation (a time limit) also ends the sum, but the final observation is a real state: it bootstraps,
  with gamma^k for the k steps actually taken.
The float work is float64 and stored as float32, here and nowhere else, for both backends.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Transitions:
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray  # float32: the discounted k-step sum
    next_obs: np.ndarray
    terminated: np.ndarray  # float32
    discounts: np.ndarray  # float32: gamma^k

    def __len__(self) -> int:
        return len(self.rewards)


class NStepCollector:
    def __init__(self, n: int, gamma: float, n_envs: int):
        if n < 1:
            raise ValueError(f"n_step must be >= 1, got {n}")
        self.n, self.gamma = int(n), float(gamma)
        self.pending: list[deque[tuple[np.ndarray, np.ndarray, float]]] = [deque() for _ in range(n_envs)]

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> Transitions | None:
        """One vector-env step (next_obs: the true successor, the final observation at an episode's end);
        the transitions this step completes, or None."""
        out: list[tuple[np.ndarray, np.ndarray, float, np.ndarray, float, float]] = []
        for i, queue in enumerate(self.pending):
            queue.append((obs[i].copy(), np.asarray(actions[i]).copy(), float(rewards[i])))
            ended = bool(terminated[i]) or bool(truncated[i])
            if ended:
                while queue:  # every pending start sees the end: shorter sums
                    out.append(self._emit(queue, next_obs[i], bool(terminated[i])))
                    queue.popleft()
            elif len(queue) == self.n:
                out.append(self._emit(queue, next_obs[i], False))
                queue.popleft()
        if not out:
            return None
        cols = list(zip(*out, strict=True))
        return Transitions(
            np.stack(cols[0]),
            np.stack(cols[1]),
            np.asarray(cols[2], np.float32),
            np.stack(cols[3]),
            np.asarray(cols[4], np.float32),
            np.asarray(cols[5], np.float32),
        )

    def _emit(
        self, queue: deque[tuple[np.ndarray, np.ndarray, float]], next_obs: np.ndarray, terminated: bool
    ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, float, float]:
        ret = 0.0
        for k, (_, _, r) in enumerate(queue):
            ret += self.gamma**k * r
        obs, action, _ = queue[0]
        return obs, action, ret, next_obs.copy(), float(terminated), self.gamma ** len(queue)
