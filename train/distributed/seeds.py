"""`rl2edge train --seeds 0,1,2`: the same run on several seeds at once, one Ray task (of `--threads`
CPUs, default one) each.

Each seed's run is exactly the run `rl2edge train --seed S` makes (same code, thread count and seed), so
the checkpoints are the same bit for bit on the same CPU. A run trains into a temporary folder on its
node and comes back as an archive (no shared file system needed); the driver writes it to
<out>/s<seed> atomically, then seeds.json and seeds.md: each seed's final evaluation, and their mean and
spread (judging a policy on one seed is how a bad policy reaches a PLC).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, Rl2EdgeError
from rl2edge.fileio import write_bytes_atomic, write_json_atomic
from rl2edge.interrupts import stop_request
from rl2edge.tables import markdown_table
from rl2edge.train.distributed.cluster import tasks_end_with_session
from rl2edge.train.distributed.stepped_run import pack_directory, store_directory

_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SeedResult:
    seed: int
    run_dir: Path
    steps: int
    wall_time_s: float
    eval_mean: float
    eval_std: float


def _train_one(
    framework: str,
    env_id: str,
    cfg: Any,
    seed: int,
    device: str,
    threads: int,
    compile_update: bool,
    matmul_precision: str,
    scratch: str | None = None,
) -> tuple[dict[str, Any], bytes]:
    """On a Ray worker: one seed's run, in a temporary folder (inside `scratch` when given, made on this node
    if missing); (its numbers, the folder as an archive)."""
    from rl2edge.train.algos import train

    logging.basicConfig(level=logging.WARNING)
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"rl2edge-s{seed}-", dir=scratch))
    try:
        r = train(
            framework,
            env_id,
            cfg,
            seed,
            tmp / "run",
            device=device,
            progress=False,
            threads=threads,
            compile_update=compile_update,
            matmul_precision=matmul_precision,
        )
        numbers = {
            "steps": r.steps,
            "wall_time_s": r.wall_time_s,
            "eval_mean": r.final_eval.mean,
            "eval_std": r.final_eval.std,
        }
        return numbers, pack_directory(tmp / "run")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def train_seeds(
    framework: str,
    env_id: str,
    cfg: Any,
    seeds: list[int],
    out: Path,
    device: str = "cpu",
    threads: int = 1,
    compile_update: bool = False,
    matmul_precision: str = "highest",
    scratch: Path | None = None,
) -> list[SeedResult]:
    """Train every seed in parallel on the connected Ray, each a task of `threads` CPUs; write
    <out>/s<seed>, seeds.json and seeds.md. `scratch`: the folder the tasks train in (each in its own
    folder inside), which the caller removes once the Ray session has ended: a task stopped with the
    session may be killed before its own cleanup runs."""
    import ray

    biggest = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
    if threads > biggest:  # Ray would wait for such a node forever
        raise ConfigError(
            f"--threads {threads}: the largest node of this Ray cluster has {biggest:g} CPUs, and each seed's "
            "run must fit on one node (nodes an autoscaler has not started yet are not counted); choose "
            "fewer threads"
        )
    task = ray.remote(num_cpus=threads, max_retries=1)(_train_one)
    args = (device, threads, compile_update, matmul_precision, None if scratch is None else str(scratch))
    pending = {task.remote(framework, env_id, cfg, s, *args): s for s in seeds}
    results: list[SeedResult] = []
    failed: dict[int, str] = {}
    # A seed between ray.get and results, with the inode of what was at its folder before (--force
    # replaces a previous run's): the folder is this run's once its inode has changed.
    storing: tuple[int, Path, dict[str, Any], int | None] | None = None
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            seed = pending.pop(done[0])
            try:
                numbers, archive = ray.get(done[0])
            except Exception as exc:  # a crashed seed does not lose the others
                failed[seed] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                _logger.error("seed %d failed: %s", seed, failed[seed])
                continue
            run_dir = out / f"s{seed}"
            storing = (seed, run_dir, numbers, _inode(run_dir))
            store_directory(archive, run_dir)  # atomic: the folder is there whole, or not at all
            results.append(SeedResult(seed, run_dir, **numbers))
            storing = None
            _logger.info(
                "seed %d: eval %.1f +- %.1f -> %s", seed, numbers["eval_mean"], numbers["eval_std"], run_dir
            )
        results.sort(key=lambda r: r.seed)
        write_summary(out, results, failed)
    except KeyboardInterrupt as exc:
        stop = stop_request(exc)  # ray.wait raises a plain KeyboardInterrupt in the signal's place
        unfinished = set(pending.values())
        if storing is not None and not any(r.seed == storing[0] for r in results):
            seed, run_dir, numbers, old = storing
            if _inode(run_dir) not in (None, old):  # renamed into place, whole, before the signal
                results.append(SeedResult(seed, run_dir, **numbers))
            else:
                unfinished.add(seed)
        # Each finished seed is already in <out>/s<seed>: keep them, say so, and record the unfinished
        # ones, whose tasks stop (and remove their temporary folders) when the session ends, or here, on a
        # Ray that someone else started and that stays up.
        if not tasks_end_with_session():
            _cancel(ray, list(pending))
        if results:
            results.sort(key=lambda r: r.seed)
            write_summary(out, results, failed, interrupted=sorted(unfinished))
            stop.kept = (
                f"kept {', '.join(f's{r.seed}' for r in results)} in {out} (seeds.json lists them); "
                f"not finished: {', '.join(f's{k}' for k in sorted(unfinished)) or 'none'}"
            )
        raise stop from None
    if failed:
        raise Rl2EdgeError(
            f"{len(failed)} of {len(seeds)} seeds failed ({'; '.join(f's{k}: {v}' for k, v in failed.items())}); "
            f"the others are in {out}"
        )
    return results


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _cancel(ray: Any, refs: list[Any], timeout_s: float = 10.0) -> None:
    """Cancel seeds still training on a Ray that stays up (one this command did not start or join): Ray
    raises KeyboardInterrupt in each task, whose `finally` removes its folder; wait a bounded time for that.
    Ray 2.60 can abort the driver here (cluster.tasks_end_with_session), so the CLI never comes here."""
    for ref in refs:
        ray.cancel(ref)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)


def spread(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, np.float64)
    return {
        "mean": float(arr.mean()),
        "std": float(arr.std()),
        "min": float(arr.min()),
        "max": float(arr.max()),
    }


def summary_rows(results: list[SeedResult]) -> list[list[str]]:
    return [
        [
            f"s{r.seed}",
            str(r.run_dir),
            str(r.steps),
            f"{r.wall_time_s:.1f}",
            f"{r.eval_mean:.1f} +- {r.eval_std:.1f}",
        ]
        for r in results
    ]


def write_summary(
    out: Path, results: list[SeedResult], failed: dict[int, str], interrupted: list[int] | None = None
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    finals = [r.eval_mean for r in results]
    doc = {
        "seeds": [
            {
                "seed": r.seed,
                "run_dir": str(r.run_dir),
                "steps": r.steps,
                "wall_time_s": r.wall_time_s,
                "eval_mean": r.eval_mean,
                "eval_std": r.eval_std,
            }
            for r in results
        ],
        "final_eval_across_seeds": spread(finals) if finals else None,
        "failed": {str(k): v for k, v in failed.items()},
        "interrupted": list(interrupted or []),  # seeds stopped by Ctrl-C/SIGTERM before they finished
    }
    write_json_atomic(out / "seeds.json", doc)
    lines = [markdown_table(["seed", "run", "steps", "wall s", "final eval"], summary_rows(results))]
    if finals:
        s = spread(finals)
        lines.append(
            f"\nAcross {len(finals)} seeds: mean {s['mean']:.1f}, std {s['std']:.1f}, "
            f"min {s['min']:.1f}, max {s['max']:.1f}."
        )
    for k, v in failed.items():
        lines.append(f"\nseed {k} failed: {v}")
    if interrupted:
        lines.append(f"\nInterrupted before they finished: {', '.join(f's{k}' for k in interrupted)}.")
    write_bytes_atomic(out / "seeds.md", ("\n".join(lines) + "\n").encode())
