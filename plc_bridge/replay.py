"""Replay: a candidate artifact run on a flight recorder's trace (runtime.trace) before it rolls out.

The candidate is fed the observations the serving policy was called on, in the order serve called it, and
its state starts afresh exactly where serve's did (the records' `reset`: the PLC's episode starts, connects
and reconnects, STALE spells, inference errors, a policy update taking over). Its actions are compared with
those written where the cycle was OK (elsewhere the written action was a fault response, not the policy's):

- Discrete and MultiDiscrete: the share of cycles whose action is equal (every component);
- Box: the max and mean |difference| per dimension, and the shadow run's measure (plc_bridge.policy_update):
  per cycle the largest |difference| as a share of its dimension's range, averaged over the cycles.

Figures are given overall and per serving policy (a trace can span updates), with the cycles where the two
differ most, and the candidate's own drift score on the trace (plc_bridge.drift).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.drift import drift_report
from rl2edge.runtime.policy import Policy
from rl2edge.runtime.trace import Trace

WORST = 5


@dataclass(frozen=True)
class ReplayGate:
    min_agreement: float = 0.9
    """Categorical actions: the least share of equal actions that passes."""
    max_diff: float = 0.1
    """Box actions: the largest mean |difference| as a share of the action's range that passes."""


def replay(candidate: Policy, trace: Trace, gate: ReplayGate) -> dict[str, Any]:
    """The candidate on the trace: its figures, and `passed` by `gate`."""
    spec, recorded = candidate.manifest.observation, trace.observation
    if spec.size != recorded.size or [k.name for k in spec.keys] != [k.name for k in recorded.keys]:
        raise ConfigError(
            f"the candidate takes {_describe(spec)}, the trace recorded {_describe(recorded)}: it cannot be "
            "replayed on this plant's observations"
        )
    categorical = candidate.categorical
    calls = trace.predicted()
    if not calls:
        raise ConfigError(f"trace {trace.folder}: no cycle in it called the policy (nothing to replay)")
    candidate.reset()
    ours: list[np.ndarray] = []
    for i in calls:
        r = trace.records[i]
        if r.get("reset"):
            candidate.reset()
        ours.append(
            np.atleast_1d(np.asarray(candidate.predict(np.asarray(r["obs"], np.float32)), np.float64))
        )
    compared = [(i, a) for i, a in zip(calls, ours, strict=True) if trace.records[i]["status"] == "OK"]
    if not compared:
        raise ConfigError(f"trace {trace.folder}: no OK cycle to compare with (every call ended in a fault)")
    served = np.asarray([trace.records[i]["action"] for i, _ in compared], np.float64)
    mine = np.stack([a for _, a in compared])
    if served.shape != mine.shape:
        raise ConfigError(
            f"the candidate's actions have {mine.shape[1]} values, the trace's {served.shape[1]}: not the same "
            "action space"
        )
    diff = np.abs(mine - served)
    span = _action_span(candidate, served.shape[1])
    per_policy: dict[str, list[int]] = defaultdict(list)
    for j, (i, _) in enumerate(compared):
        per_policy[str(trace.records[i].get("policy"))].append(j)

    def figures(rows: list[int] | slice) -> dict[str, Any]:
        d = diff[rows]
        if categorical:
            return {"cycles": len(d), "agreement": float(np.mean(np.all(d == 0, axis=1)))}
        return {
            "cycles": len(d),
            "max_abs_diff": d.max(axis=0).tolist(),
            "mean_abs_diff": d.mean(axis=0).tolist(),
            "mean_diff_share_of_range": float(np.mean((d / span).max(axis=1))),
        }

    overall = figures(slice(None))
    if categorical:
        passed = overall["agreement"] >= gate.min_agreement
        rule = f"agreement >= {gate.min_agreement:g}"
    else:
        passed = overall["mean_diff_share_of_range"] <= gate.max_diff
        rule = f"mean |difference| <= {gate.max_diff:g} of the action's range"
    score = (diff / span).max(axis=1)
    worst = np.argsort(-score, kind="stable")[:WORST]
    obs, _ = trace.observations()
    return {
        "candidate": str(candidate.manifest.path),
        "trace": str(trace.folder),
        "calls_replayed": len(calls),
        "resets": sum(bool(trace.records[i].get("reset")) for i in calls),
        "compared": len(compared),
        "kind": "categorical" if categorical else "box",
        **overall,
        "per_policy": {p: figures(rows) for p, rows in per_policy.items()},
        "worst": [
            {
                "cycle": trace.records[compared[j][0]]["cycle"],
                "t": trace.records[compared[j][0]]["t"],
                "obs": trace.records[compared[j][0]]["obs"],
                "served": served[j].tolist(),
                "candidate": mine[j].tolist(),
            }
            for j in worst
            if score[j] > 0
        ],
        "drift": drift_report(candidate.manifest.data, obs),
        "gate": rule,
        "passed": bool(passed),
    }


def _action_span(policy: Policy, width: int) -> np.ndarray:
    """The Box action's range per dimension, as the shadow run takes it (1 for categorical actions)."""
    if policy.categorical:
        return np.ones(width)
    span = policy.action_high.astype(np.float64) - policy.action_low.astype(np.float64)
    return np.maximum(np.broadcast_to(span.reshape(-1), (width,)), 1e-12)


def _describe(spec: Any) -> str:
    keys = ", ".join(f"{k.name}[{k.size}]" for k in spec.keys)
    return f"a Dict of {keys}" if keys else f"{spec.size} values"
