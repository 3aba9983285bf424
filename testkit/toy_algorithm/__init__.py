"""A toy algorithm added the way docs/architecture.md's recipe says, from its own places alone, to show that
nothing else needs a change: Expected SARSA (van Seijen et al. 2009) on DQN's networks. Its TD target is
the expectation of the target network's Q-values under the epsilon-greedy behaviour policy, at the
exploration's final epsilon, instead of their maximum:

    target = r + gamma * (1 - done) * ((1 - eps) * max_a Q'(s', a) + eps * mean_a Q'(s', a))

Its places: the row (tests/test_toy_algorithm.py builds it), this config, one agent module per backend
(torch_agent, tf_agent) and a preset file the test writes. Its checkpoint's network type is its own
("esarsa_mlp"), so export meets a type no shipped row names.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl2edge.train.core.offpolicy_config import DQNConfig


@dataclass
class ExpectedSarsaConfig(DQNConfig):
    """DQN's hyperparameters (SB3's names); the target's epsilon is exploration_final_eps."""

    algo = "esarsa"

    def target_weights(self) -> tuple[float, float]:
        """(weight of the max, weight of the mean) in the expected target."""
        eps = float(self.exploration_final_eps)
        return 1.0 - eps, eps
