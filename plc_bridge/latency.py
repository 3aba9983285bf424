"""A fixed-memory latency histogram (log-spaced buckets, ~1% resolution) for runs of any length."""

from __future__ import annotations

import math

import numpy as np


class LatencyHistogram:
    def __init__(self, lo_ms: float = 1e-3, hi_ms: float = 1e5, buckets: int = 2000):
        self.edges = np.geomspace(lo_ms, hi_ms, buckets + 1)
        self.counts = np.zeros(buckets + 2, np.int64)  # [under, buckets..., over]
        self.count = 0
        self.max_ms = 0.0
        self.sum_ms = 0.0
        # add() runs in every control cycle: the bucket from a logarithm in plain Python (a numpy call on
        # a cache-cold 2001-edge array costs tens of microseconds after 20 ms of other work)
        self._edges = self.edges.tolist()
        self._lo, self._per_log = lo_ms, buckets / math.log(hi_ms / lo_ms)

    def _bucket(self, ms: float) -> int:
        """searchsorted(edges, ms, side="right"), as arithmetic corrected on the edges themselves."""
        e = self._edges
        if ms < e[0]:
            return 0
        if not ms < e[-1]:  # above, and NaN (where searchsorted sorts it)
            return len(e)
        i = min(max(int(math.log(ms / self._lo) * self._per_log) + 1, 1), len(e) - 1)
        while i > 1 and ms < e[i - 1]:  # rounding of the logarithm: at most a step either way
            i -= 1
        while i < len(e) and ms >= e[i]:
            i += 1
        return i

    def add(self, ms: float) -> None:
        self.counts[self._bucket(ms)] += 1
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
