"""A sum tree over priorities: O(log n) proportional sampling and updates, vectorized over a batch.

The tree is one float64 array of 2 * L nodes (L = capacity rounded up to a power of two): node 1 is the
root, node i's children are 2i and 2i + 1, leaf j is node L + j. Every level of a batch's descent or
update is one numpy operation, so a batch of 256 costs log2(L) array ops, not 256 * log2(L) Python steps.
float64, because the root is a running sum of up to millions of float priorities that float32 would
round to the point of sampling the last leaves with the wrong frequency.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self.nodes = np.zeros(2 * self.leaves, np.float64)

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        return self.nodes[self.leaves + np.asarray(idx)]

    def update(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves idx to values (a repeated index keeps its last value), then recompute their ancestors."""
        idx = np.asarray(idx, np.int64).reshape(-1)
        values = np.asarray(values, np.float64).reshape(-1)
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"leaf index out of [0, {self.capacity})")
        if not np.all(np.isfinite(values)) or values.min() < 0:
            raise ValueError("priorities must be finite and non-negative")
        self.nodes[self.leaves + idx] = values  # numpy assigns in order: the last of a repeated index wins
        parents = np.unique((self.leaves + idx) >> 1)
        while parents[0] >= 1:
            self.nodes[parents] = self.nodes[2 * parents] + self.nodes[2 * parents + 1]
            if parents[0] == 1:
                break
            parents = np.unique(parents >> 1)

    def find(self, mass: np.ndarray) -> np.ndarray:
        """For each value in [0, total), the leaf whose prefix-sum interval holds it."""
        mass = np.asarray(mass, np.float64).copy()
        node = np.ones(mass.shape, np.int64)
        while self.leaves > 1 and node.size and node[0] < self.leaves:  # every path has the same depth
            left = 2 * node
            left_mass = self.nodes[left]
            right = mass >= left_mass
            mass = np.where(right, mass - left_mass, mass)
            node = np.where(right, left + 1, left)
        # Rounding can carry a value just past the last nonzero leaf; clamp to the filled range.
        return np.minimum(node - self.leaves, self.capacity - 1)
