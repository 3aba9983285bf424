"""The control loop's invariants over generated plant behaviour (testkit.loop_properties): a real asyncua
server on loopback, the real loop, a seeded script of odd observations, qualities, sequence numbers,
episode starts, refused writes, model-process deaths and policy updates; every cycle checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from testkit.loop_properties import CaseSpec, check_case, run_case

DISCRETE = [
    {"deadline_miss": "hold", "invalid": "hold", "stale": "safe", "inference_error": "hold"},
    {"deadline_miss": "safe", "invalid": "safe", "stale": "hold", "inference_error": "safe"},
]
BOX = [
    {"deadline_miss": "hold", "invalid": "ramp", "stale": "ramp", "inference_error": "hold"},
    {"deadline_miss": "ramp", "invalid": "hold", "stale": "safe", "inference_error": "ramp"},
]


def _run(spec: CaseSpec, artifacts: tuple[Path, Path], tmp_path: Path) -> None:
    run, node_map = asyncio.run(run_case(spec, artifacts, tmp_path))
    verdict = check_case(run, node_map, artifacts)
    print(
        spec.seed, verdict.checked, verdict.ok_compared, verdict.statuses, verdict.kinds, verdict.noise_misses
    )
    assert not verdict.violations, "\n".join(verdict.violations[:20])
    assert verdict.ok_compared > spec.cycles // 4, verdict


SEEDS = [
    0,
    pytest.param(1, marks=pytest.mark.integration),
    *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(2, 22)),
]
"""Scripts of 200 cycles: seed 0 in the default tests, seed 1 in the integration tier, 20 more as `slow`
(which odd events meet in one case is what the seeds vary)."""


@pytest.mark.parametrize("seed", SEEDS)
def test_discrete_policy_keeps_the_loops_promises(seed: int, cartpole_all, tmp_path: Path) -> None:
    root = cartpole_all[1]
    spec = CaseSpec(seed=seed, cycles=200, fault_response=DISCRETE[seed % 2])
    _run(spec, (root / "int8", root / "fp32"), tmp_path)


@pytest.mark.parametrize("seed", SEEDS)
def test_box_policy_keeps_the_loops_promises(seed: int, pendulum_int8, pendulum_fp32, tmp_path: Path) -> None:
    spec = CaseSpec(seed=seed, cycles=200, fault_response=BOX[seed % 2], ramp_rate=20.0)
    _run(spec, (pendulum_int8[1], pendulum_fp32[1]), tmp_path)
