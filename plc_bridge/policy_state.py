"""The rules of a stateful policy in the control loop (a recurrent cell's h and c, a frame stack, a rate
limit's previous action: runtime.state): when its state advances and when it starts afresh.

- The state advances once per plant step: a cycle that re-reads the observation of the sequence number
  last served writes that step's decision again, without calling the policy.
- It starts afresh (the graph fed episode_start = 1) at the next valid observation after: the PLC's
  episode-start flag (the node map's episode_start node; a flag on an observation that could not be
  served is kept for the next one), every connect and reconnect, a STALE spell, an inference error, and a
  policy update taking over. Each of serve's own resets is counted (`state_resets`) and logged.

A stateless policy goes through the same calls, which then do nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from rl2edge.plc_bridge.loop_state import Counters
from rl2edge.runtime.policy import Policy

_logger = logging.getLogger(__name__)

RULES = "advances once per new sequence number, resets at every connect and after a STALE spell"


class PolicyStateRules:
    def __init__(self, counters: Counters):
        self.counters = counters
        self.stateful = False
        self.read_seq: Any = None
        """The sequence number the last cycle read (Bad ones aside)."""
        self.served_seq: Any = None
        """The sequence number whose observation last advanced the state, while it is still the one read
        (None: none since the last reset or the last new number)."""
        self.served_action: list[float] | None = None
        """The action decided then, which a cycle re-reading that observation writes again."""
        self.reset_due = ""
        """Why the state is reset before the next valid observation ("": it is not)."""
        self.episode_start_due = False
        """The PLC flagged an episode start on an observation that could not be served (invalid, stale)."""
        self.predicted_now = False
        """This cycle called the policy (what a recorder needs to replay the calls in order)."""
        self.reset_now = False
        """This cycle's call started from a fresh state."""

    def bind(self, policy: Policy, episode_start_node: Any) -> None:
        """The policy served from now on; logs its state and the rules that apply to it (a map with neither
        an episode_start node nor state_across_episodes was refused by observation_guard.check_state_rule)."""
        self.stateful = bool(policy.states)
        if not self.stateful:
            return
        names = ", ".join(policy.state())
        if episode_start_node is None:
            _logger.warning(
                "the artifact carries state (%s): it %s; the node map names no episode_start node and says "
                "state_across_episodes: true, so its state runs on from one episode into the next",
                names,
                RULES,
            )
        else:
            _logger.info(
                "the artifact carries state (%s): it %s, and with each episode start %s flags",
                names,
                RULES,
                episode_start_node,
            )

    def take_over(self, policy: Policy) -> None:
        """A policy update took over: its state starts afresh with its first observation served (its shadow
        run's state saw another history: the candidate was not reset with the serving policy's episodes)."""
        self.stateful = bool(policy.states)
        self.served_seq = self.served_action = None
        self.reset_due = ""
        self.reset_before_next("a policy update took over")

    def note_reading(self, seq: Any, flagged: bool) -> None:
        """A cycle read `seq` (None: the PLC marked it Bad) with the PLC's episode-start flag. A number other
        than the last one read is a new plant step, whatever its value: a number that comes back (a PLC
        program restarted, a counter that wrapped) is not the step served under it before. The flag, on
        an observation not served yet, is kept until one is (a flag raised for one step is not lost to an
        invalid or stale cycle); a re-read of the served step adds nothing."""
        self.predicted_now = self.reset_now = False
        if seq is not None and seq != self.read_seq:
            self.read_seq = seq
            self.served_seq = self.served_action = None
        if flagged and seq != self.served_seq:
            self.episode_start_due = True

    def reset_before_next(self, why: str) -> None:
        """The state starts afresh at the next valid observation (counted as `state_resets`)."""
        if self.stateful and not self.reset_due:
            self.reset_due = why
            self.served_seq = self.served_action = None
            self.counters.state_resets += 1

    def decided_already(self, seq: Any) -> list[float] | None:
        """This plant step's decision, when the state already advanced on it: written again."""
        if self.stateful and self.served_seq is not None and seq == self.served_seq:
            return self.served_action
        return None

    def before_predict(self, policy: Policy) -> None:
        """Reset the policy here if the PLC's episode start or one of serve's rules asks for it."""
        if self.stateful and (self.episode_start_due or self.reset_due):
            if self.reset_due:
                _logger.info("policy state reset: %s", self.reset_due)
            policy.reset()
            self.reset_due = ""
            self.reset_now = True
        self.episode_start_due = False

    def after_predict(self, seq: Any, action: list[float]) -> None:
        self.predicted_now = True
        if self.stateful:
            self.served_seq, self.served_action = seq, action
