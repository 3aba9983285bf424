"""A fixed-memory latency histogram (log-spaced buckets, ~1% resolution) for runs of any length."""

from __future__ import annotations

import numpy as np


class LatencyHistogram:
    def __init__(self, lo_ms: float = 1e-3, hi_ms: float = 1e5, buckets: int = 2000):
        self.edges = np.geomspace(lo_ms, hi_ms, buckets + 1)
        self.counts = np.zeros(buckets + 2, np.int64)  # [under, buckets..., over]
        self.count = 0
        self.max_ms = 0.0
        self.sum_ms = 0.0

    def add(self, ms: float) -> None:
        self.counts[int(np.searchsorted(self.edges, ms, side="right"))] += 1
        self.count += 1
        self.sum_ms += ms
        self.max_ms = max(self.max_ms, ms)

    def percentile(self, q: float) -> float:
        """Upper edge of the bucket holding the q-th percentile: never under-reports."""
        if self.count == 0:
            return float("nan")
        rank = max(1, int(np.ceil(q / 100.0 * self.count)))
        idx = int(np.searchsorted(np.cumsum(self.counts), rank))
        if idx == 0:
            return float(self.edges[0])
        if idx > len(self.edges) - 1:
            return self.max_ms
        return float(min(self.edges[idx], self.max_ms))

    def summary(self) -> dict[str, float]:
        return {
            "p50": self.percentile(50),
            "p99": self.percentile(99),
            "p99.9": self.percentile(99.9),
            "max": self.max_ms,
            "mean": self.sum_ms / self.count if self.count else float("nan"),
        }
