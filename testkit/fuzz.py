"""Random mutations of nested data for the loaders' fuzz tests."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

ODD_SCALARS: list[Any] = [None, True, -1, 0, 2**70, 1e308, float("inf"), float("nan"), "", "abc"]
"""Values no loader expects, for the fuzz tests' mutations (each test adds its own)."""


def paths_of(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into nested dicts and lists (the first 8 items of a list)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:8]):
            out += paths_of(v, (*prefix, i))
    return out


def mutate(
    data: Any, rng: np.random.Generator, odd: list[Any], drop: float = 0.2, unknown_keys: list[Any] = ()
) -> Any:
    """A deep copy of `data` with 1 to 3 random changes: a value replaced by one of `odd`, a key dropped
    (probability `drop`) or, with `unknown_keys`, a key added that the loader does not know."""
    m = copy.deepcopy(data)
    for _ in range(int(rng.integers(1, 4))):
        paths = paths_of(m)
        if not paths:
            break
        path = paths[int(rng.integers(len(paths)))]
        parent = m
        for key in path[:-1]:
            parent = parent[key]
        r = rng.random()
        if r < drop and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif unknown_keys and r < drop + 0.05 and isinstance(parent, dict):
            parent[unknown_keys[int(rng.integers(len(unknown_keys)))]] = 1
        else:
            parent[path[-1]] = copy.deepcopy(odd[int(rng.integers(len(odd)))])
    return m
