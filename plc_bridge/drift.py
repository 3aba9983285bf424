"""Observation drift: how far what the plant sends has moved from the data the artifact was made with, per
observation dimension, from what the manifest carries.

The reference of each dimension is a mean and a standard deviation:
- from `observation_stats` where export wrote it (export.calibration.observation_stats: the calibration data,
  i.e. the policy's own closed loop in its training env, or the recorded plant observations it was calibrated
  on): what an unmoved plant under this policy looks like. The deviation is never taken below the training
  one (`folded.normalization`, where it normalizes): a value the policy holds nearly constant would
  otherwise alarm on sensor noise;
- else from `folded.normalization` (the frozen training statistics the graph normalizes with);
- else raw units (an artifact that normalizes nothing and has no statistics; `basis: "raw"`).

The **shift** of a dimension is |window mean - reference mean| / reference std; the score of a window is the
largest shift over its dimensions. `observation_stats` also gives the calibration range: the share of
observations **outside** it is reported beside the score. A window of W observations of an unmoved plant
shifts by about 1/sqrt(W) from sampling alone, more when the observations are correlated in time (they are:
a window is seconds of a few trajectories); benchmarks/results/recorder.md states how fast a shift is found
and how often an unshifted plant alarms.

`DriftMonitor` is serve's: a ring buffer of the last `window` valid observations, the score recomputed every
`every` cycles in one vectorized pass, never per value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rl2edge.plc_bridge.drift_config import DEFAULT_THRESHOLD, DriftConfig
from rl2edge.plc_bridge.snapshot import DriftState
from rl2edge.runtime.manifest import Manifest
from rl2edge.specs import ObservationSpec

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriftReference:
    names: list[str]
    """One per flat dimension: key[i] (a Dict key's i-th value) or obs[i]."""
    mean: np.ndarray
    inv_std: np.ndarray
    """1 / the reference standard deviation."""
    basis: str
    """"calibration", "training normalization" or "raw"."""
    low: np.ndarray | None
    high: np.ndarray | None

    @classmethod
    def of(cls, manifest: Manifest) -> DriftReference:
        return cls.from_data(manifest.data)

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> DriftReference:
        """From a manifest's data, or a trace's header (which copies the same three entries): `observation`,
        `folded.normalization`, `observation_stats`."""
        spec = ObservationSpec.from_json(data["observation"])
        keys = [(k.name, k.size) for k in spec.keys] if spec.keys else [("obs", spec.size)]
        names = [f"{name}[{i}]" for name, size in keys for i in range(size)]
        width = len(names)
        norm = (data.get("folded") or {}).get("normalization") or {}
        train_mean, train_inv = norm.get("mean") or [], norm.get("inv_std") or []
        normalized = bool(norm.get("enabled")) and len(train_mean) == width and len(train_inv) == width
        stats = data.get("observation_stats") or {}

        def per_dim(name: str) -> np.ndarray | None:
            values = stats.get(name) or []
            return np.asarray(values, np.float64) if len(values) == width else None

        low, high, mean, std = per_dim("min"), per_dim("max"), per_dim("mean"), per_dim("std")
        if mean is not None and std is not None and low is not None and high is not None:
            floor = np.maximum(1e-3 * (high - low), 1e-6)
            if normalized:
                floor = np.maximum(floor, 1.0 / np.asarray(train_inv, np.float64))
            return cls(names, mean, 1.0 / np.maximum(std, floor), "calibration", low, high)
        if normalized:
            t_mean, t_inv = np.asarray(train_mean, np.float64), np.asarray(train_inv, np.float64)
            return cls(names, t_mean, t_inv, "training normalization", low, high)
        return cls(names, np.zeros(width), np.ones(width), "raw", low, high)

    def shifts(self, window: np.ndarray) -> np.ndarray:
        """|window mean - reference mean| / reference std, per dimension."""
        return np.abs(window.mean(axis=0) - self.mean) * self.inv_std

    def outside(self, window: np.ndarray) -> np.ndarray | None:
        """Per dimension, the share of the window outside the calibration data's [min, max]."""
        if self.low is None or self.high is None:
            return None
        return np.mean((window < self.low) | (window > self.high), axis=0)


def drift_report(
    reference: Mapping[str, Any], rows: np.ndarray, threshold: float = DEFAULT_THRESHOLD
) -> dict[str, Any]:
    """The drift of `rows` (observations, flat) against `reference`'s statistics (a manifest's data or a trace's
    header): the score, each key's largest shift, the dimensions past the threshold, the share outside the
    calibration range."""
    ref = DriftReference.from_data(reference)
    if len(rows) == 0:
        return {"score": None, "why": "no valid observation"}
    x = np.asarray(rows, np.float64).reshape(len(rows), -1)
    shifts = ref.shifts(x)
    outside = ref.outside(x)
    top = np.argsort(-shifts)[:5]
    per_key: dict[str, float] = {}
    for name, value in zip(ref.names, shifts, strict=True):
        key = name.rsplit("[", 1)[0]
        per_key[key] = max(per_key.get(key, 0.0), round(float(value), 4))
    return {
        "score": float(shifts.max()),
        "threshold": threshold,
        "basis": ref.basis,
        "per_key": per_key,
        "over_threshold": [ref.names[i] for i in np.flatnonzero(shifts > threshold)],
        "largest": {ref.names[i]: round(float(shifts[i]), 4) for i in top},
        "outside_calibration_range": None if outside is None else float(np.mean(outside)),
    }


class DriftMonitor:
    """serve's rolling drift score (see the module's docstring). `observe` from the loop's hook, per cycle."""

    def __init__(self, manifest: Manifest, cfg: DriftConfig | None = None):
        cfg = cfg or DriftConfig()
        self.ref = DriftReference.of(manifest)
        self.artifact = str(manifest.path)
        self.threshold = cfg.threshold
        self.every = min(cfg.every, cfg.window)
        self._buf = np.zeros((cfg.window, len(self.ref.names)), np.float64)
        self._n = 0
        self._since = 0
        self.score: float | None = None
        """The last window's score; None until the first window is full."""
        self.per_dim: np.ndarray | None = None
        self.alarms = 0
        """Windows scored over the threshold."""
        self.first_alarm_at: int | None = None
        """The observation count at the first window over the threshold."""
        self._scored = 0
        self._state: DriftState | None = None
        self._state_n = -1

    def observe(self, obs: Any) -> None:
        row = np.asarray(obs, np.float64).reshape(-1)
        if row.size != self._buf.shape[1] or not np.all(np.isfinite(row)):
            return  # an INVALID cycle's observation: the guard counts it, not the drift
        self._buf[self._n % len(self._buf)] = row
        self._n += 1
        self._since += 1
        if self._n >= len(self._buf) and self._since >= self.every:
            self._since = 0
            self.per_dim = self.ref.shifts(self._buf)
            self.score = float(self.per_dim.max())
            self._scored += 1
            if self.score > self.threshold:
                self.alarms += 1
                if self.first_alarm_at is None:
                    self.first_alarm_at = self._n
                    _logger.warning(
                        "observation drift: %s (the largest shifts, in standard deviations of the %s data) past %g "
                        "after %d observations: the plant no longer looks like the data %s was made with",
                        self.summary().get("largest"),
                        self.ref.basis,
                        self.threshold,
                        self._n,
                        self.artifact,
                    )

    def state(self) -> DriftState:
        """The figures as of the last scored window, frozen for a snapshot (recomputed only when the score
        changes: the metrics take a snapshot per cycle)."""
        if self._state is None or self._state_n != self._scored:
            per_dim = (
                {}
                if self.per_dim is None
                else {n: float(v) for n, v in zip(self.ref.names, self.per_dim, strict=True)}
            )
            self._state, self._state_n = (
                DriftState(self.score, self.threshold, per_dim, self.summary()),
                self._scored,
            )
        return self._state

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "score": self.score,
            "threshold": self.threshold,
            "window": len(self._buf),
            "basis": self.ref.basis,
            "observations": self._n,
            "alarms": self.alarms,
            "first_alarm_at": self.first_alarm_at,
        }
        if self.per_dim is not None:
            top = np.argsort(-self.per_dim)[:5]
            out["largest"] = {self.ref.names[i]: round(float(self.per_dim[i]), 4) for i in top}
        return out
