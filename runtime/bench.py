"""`rl2edge bench latency ARTIFACT`: what one artifact costs per call on this machine, through the
runtime alone (numpy + an interpreter), so a field engineer can run it on the device from the wheel.

Two forms per thread count, interleaved: the interpreter's bare invoke on the model's own input, and
`Policy.predict` (validation, int8 (de)quantization, clamping) on observations drawn inside the declared
bounds. Microseconds per call, p50/p99/p99.9/max after a warm-up. Writes latency_artifact.json and .md
to `--out` (a PNG too where matplotlib is installed, as on the workstation).

The suite that compares forms against torch and ONNX Runtime needs the training stack and lives in the
source tree: `python benchmarks/latency.py --suite`.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.fileio import write_bytes_atomic, write_json_atomic
from rl2edge.specs import ObservationSpec
from rl2edge.tables import markdown_table, package_versions


def measure(
    fns: dict[str, Callable[[], Any]], calls: int, rounds: int = 5, warmup: int = 50
) -> dict[str, dict[str, float]]:
    """Per-call microseconds of each function, interleaved: every round runs each function calls/rounds
    times, so that the machine's drift (shared, noisy) hits all forms alike."""
    clock = time.perf_counter_ns
    samples: dict[str, list[np.ndarray]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for name, fn in fns.items():
            t = np.empty(per_round)
            for i in range(per_round):
                t0 = clock()
                fn()
                t[i] = clock() - t0
            samples[name].append(t / 1e3)
    return {name: percentiles_us(np.concatenate(parts)) for name, parts in samples.items()}


def percentiles_us(t: np.ndarray) -> dict[str, float]:
    """p50, p99, p99.9 and max of per-call microseconds, and the number of calls."""
    return {
        "p50": float(np.percentile(t, 50)),
        "p99": float(np.percentile(t, 99)),
        "p99.9": float(np.percentile(t, 99.9)),
        "max": float(t.max()),
        "calls": int(t.size),
    }


def artifact_forms(
    art: Path, obs: np.ndarray, threads: int, prefix: str = ""
) -> dict[str, Callable[[], Any]]:
    """Bare invoke and full predict of one artifact's TFLite file."""
    from rl2edge.runtime import Policy

    policy = Policy.load(art, num_threads=threads)
    mode = policy.manifest.quantization["mode"]
    # The bare invoke runs on the same observations, made into the model's own input beforehand (quantized
    # for int8, in the model's layout): a stream of frames larger than the core's cache costs the same
    # memory reads in both forms, so the difference is predict's own work.
    xs = [policy.model_input(o) for o in obs]
    backend = policy.backend
    i, j = iter(range(1 << 62)), iter(range(1 << 62))
    return {
        f"{prefix}TFLite {mode} invoke": lambda: backend.run(xs[next(j) % len(xs)]),
        f"{prefix}TFLite {mode} predict": lambda: policy.predict(obs[next(i) % len(obs)]),
    }


def artifact_observations(spec: ObservationSpec, n: int = 256) -> np.ndarray:
    """Observations inside the declared bounds (unbounded sides: a unit normal's usual range)."""
    rng = np.random.default_rng(0)
    shape = spec.shape
    bounds_low, bounds_high = spec.bounds
    low = np.array([-1.0 if v is None else v for v in bounds_low])
    high = np.array([1.0 if v is None else v for v in bounds_high])
    x = rng.uniform(low, high, size=(n, low.size)).astype(np.float32).reshape(n, *shape)
    dtype = np.dtype(spec.dtype)
    return np.rint(x).astype(dtype) if dtype.kind in "iu" else x  # as the env gives them: uint8 frames


def latency_table(rows: list[dict[str, Any]]) -> str:
    return markdown_table(
        ["policy", "form", "threads", "p50 us", "p99 us", "p99.9 us", "max us"],
        [
            [r["policy"], r["form"], r["threads"], *(f"{r[k]:.1f}" for k in ("p50", "p99", "p99.9", "max"))]
            for r in rows
        ],
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on: enough to compare a device with the workstation."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = package_versions(("rl2edge", "numpy", "ai-edge-litert", "tflite-runtime", "asyncua"))
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "versions": versions,
    }


def bench_artifact(
    art: Path, calls: int = 3000, threads: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    from rl2edge.runtime import load_manifest

    obs = artifact_observations(load_manifest(art).observation)
    rows: list[dict[str, Any]] = []
    for n in threads or sorted({1, os.cpu_count() or 1}):
        stats = measure(artifact_forms(art, obs, n), calls)
        rows += [{"policy": str(art), "form": name, "threads": n, **st} for name, st in stats.items()]
    return rows


def main(argv: Sequence[str] | None = None) -> tuple[dict[str, Any], str]:
    """Measure, write the files, and return (data, markdown) for the CLI to show."""
    ap = argparse.ArgumentParser(prog="rl2edge bench latency", description=__doc__.splitlines()[0])
    ap.add_argument("artifact", help="artifact directory")
    ap.add_argument("--calls", type=int, default=3000, help="calls per form and thread count (default: 3000)")
    ap.add_argument("--out", default=".", help="directory for latency_artifact.json/.md (default: .)")
    args = ap.parse_args(argv)
    rows = bench_artifact(Path(args.artifact), args.calls)
    lines = []
    for r in rows:
        if r["form"].endswith(" predict"):
            invoke = next(
                x for x in rows if x["threads"] == r["threads"] and x["form"] == r["form"][:-8] + " invoke"
            )
            lines.append(
                f"- {r['threads']} thread(s): predict adds {r['p50'] - invoke['p50']:.1f} us p50 over the bare invoke"
            )
    md = "Latency per call in microseconds (single observation, after warm-up).\n\n" + latency_table(rows)
    md += "\n\n" + "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"machine": machine(), "artifact": args.artifact, "rows": rows}
    write_json_atomic(out / "latency_artifact.json", data)
    write_bytes_atomic(out / "latency_artifact.md", md.encode())
    return data, md
