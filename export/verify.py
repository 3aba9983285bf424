"""Numerical verification of an exported file against its source, on held-out rollout observations."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rl2edge.errors import ShapeError, ToleranceError
from rl2edge.export.tolerances import Tolerances


def compare_actions(
    source_actions: np.ndarray,
    exported_actions: np.ndarray,
    discrete: bool,
    source_margins: np.ndarray | None,
    tol: Tolerances,
) -> dict[str, Any]:
    """Categorical (`discrete`): agreement, and disagreements outside near ties; a multi-discrete action
    ([N, components]) agrees where every component does. Box: max and mean |difference|."""
    if source_actions.shape != exported_actions.shape:
        raise ShapeError(
            f"exported actions have shape {exported_actions.shape}, the source's {source_actions.shape}"
        )
    if discrete:
        agree = source_actions == exported_actions
        if agree.ndim > 1:
            agree = agree.all(axis=-1)
        decisive = np.ones_like(agree) if source_margins is None else source_margins >= tol.discrete_margin
        return {
            "metric": "agreement",
            "agreement": float(agree.mean()),
            "disagreements_outside_ties": int((~agree & decisive).sum()),
            "samples": int(agree.size),
        }
    err = np.abs(source_actions.astype(np.float64) - exported_actions.astype(np.float64))
    return {
        "metric": "abs_error",
        "max_abs_error": float(err.max()),
        "mean_abs_error": float(err.mean()),
        "samples": int(err.shape[0]),
    }


def top2_margins(pre_head: np.ndarray, nvec: tuple[int, ...] | None = None) -> np.ndarray:
    """The gap between the top two logits/Q-values per sample (near ties may flip in any conversion); a
    multi-discrete action's: the smallest gap over its components' slices."""
    parts = [pre_head] if nvec is None else np.split(pre_head, np.cumsum(nvec)[:-1], axis=-1)
    gaps = []
    for part in parts:
        top2 = np.sort(part, axis=-1)[:, -2:]
        gaps.append(top2[:, 1] - top2[:, 0])
    return np.min(np.stack(gaps), axis=0)


def require_fp32_parity(name: str, result: dict[str, Any], tol: Tolerances) -> None:
    """fp32 files must reproduce the source: above tolerance the export fails and writes nothing."""
    if result["metric"] == "agreement":
        if result["disagreements_outside_ties"]:
            raise ToleranceError(
                f"{name}: {result['disagreements_outside_ties']} of {result['samples']} held-out observations get a "
                f"different action than the source (top-two logit margin >= {tol.discrete_margin})"
            )
    elif result["max_abs_error"] > tol.fp32_action_atol:
        raise ToleranceError(
            f"{name}: max |action - source action| = {result['max_abs_error']:.3g} over {result['samples']} held-out "
            f"observations exceeds atol {tol.fp32_action_atol:g}"
        )


def parity_summary(result: dict[str, Any]) -> str:
    if result["metric"] == "agreement":
        return f"agree {100 * result['agreement']:.1f}%"
    return f"max|Δ| {result['max_abs_error']:.1e}"


def latency_us(fn: Callable[[np.ndarray], Any], samples: np.ndarray, calls: int = 2000) -> dict[str, float]:
    """Median and p99 of single calls in microseconds, after a warm-up. A figure for the report; the
    benchmarks own the careful measurements."""
    for row in samples[:50]:
        fn(row)
    times = np.empty(calls)
    n = len(samples)
    for i in range(calls):
        x = samples[i % n]
        t0 = time.perf_counter_ns()
        fn(x)
        times[i] = time.perf_counter_ns() - t0
    return {"p50_us": float(np.percentile(times, 50) / 1e3), "p99_us": float(np.percentile(times, 99) / 1e3)}


def latency_interleaved_us(
    fns: dict[str, Callable[[np.ndarray], Any]], samples: np.ndarray, calls: int = 2000, rounds: int = 5
) -> dict[str, dict[str, float]]:
    """latency_us for several callables at once, interleaved over rounds so that a noisy machine's drift
    hits all of them alike: what a choice between them should rest on."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for row in samples[:50]:
            fn(row)
    per_round, n = max(1, calls // rounds), len(samples)
    for r in range(rounds):
        for name, fn in fns.items():
            for i in range(per_round):
                x = samples[(r * per_round + i) % n]
                t0 = time.perf_counter_ns()
                fn(x)
                times[name].append(time.perf_counter_ns() - t0)
    return {
        name: {"p50_us": float(np.percentile(t, 50) / 1e3), "p99_us": float(np.percentile(t, 99) / 1e3)}
        for name, t in times.items()
    }
