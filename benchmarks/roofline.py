"""The off-policy trainers' roofline: what one gradient step's dense layers cost when nothing else runs,
and where the rest of a gradient step's time goes.

The limit is measured, not derived from a FLOP formula: one gradient step of the torch agent runs under a
dispatch mode that records every matmul it issues (shapes and strides, i.e. which operand is transposed,
forward and backward alike), and that list is replayed back to back on fresh operands in the library each
contender's dense layers run on (torch's MKL; TensorFlow's own kernels in one graph, as its training phase runs them).
Next to it, per rl2edge backend: the agent's gradient step alone (its `train` call on random batches of
the preset's shapes) and the same agent with 8-wide hidden layers (per-op dispatch, autograd or graph
overhead and Python, which do not grow with the width).

    python -m benchmarks.roofline --framework torch --algo sac --env Pendulum-v1 [--threads 1]

prints one JSON line; benchmarks/train_throughput.py runs it once per framework, each in a fresh process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Every aten op that multiplies matrices; a step that issues one not replayed here fails the capture
# rather than leaving its work out of the limit.
_REPLAYED = ("mm", "addmm")
_MATMUL_LIKE = ("bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "matmul", "linear", "_addmm_activation")
NARROW = [8, 8]  # hidden widths of the overhead-only agent


@dataclass(frozen=True)
class Matmul:
    """One recorded matmul: [m, k] x [k, n] (+ a bias of length n for addmm); a_t / b_t: the operand is a
    transposed view (column-major), as autograd passes W.t() in a Linear's forward and grad.t() in its
    weight gradient."""

    m: int
    k: int
    n: int
    a_t: bool
    b_t: bool
    bias: bool

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


def _transposed(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    return shape[0] > 1 and shape[1] > 1 and stride[0] == 1


def _agent(
    framework: str, algo: str, env_id: str, overrides: dict[str, Any], seed: int = 0
) -> tuple[Any, Any, dict[str, Any]]:
    """The framework's agent for the preset (with `overrides`), its config and its network spec."""
    import gymnasium as gym

    from rl2edge.train.algos import build_config, get
    from rl2edge.train.core.offpolicy_driver import network_spec
    from rl2edge.train.core.spaces import action_spec, observation_spec

    cfg = build_config(env_id, overrides=overrides, algo=algo)
    env = gym.make(env_id)
    network = network_spec(
        get(algo).network, cfg, observation_spec(env.observation_space), action_spec(env.action_space)
    )
    env.close()
    return get(algo).agent_class(framework)(network, cfg, seed, "cpu"), cfg, network


def _batch(network: Any, cfg: Any, n: int, rng: np.random.Generator) -> Any:
    """n stacked batches of the preset's batch size, random (the arithmetic does not depend on values)."""
    from rl2edge.train.core.replay import ReplayBatch

    obs_dim, act_dim, b = int(network.obs_dim), int(network.act_dim), cfg.batch_size
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    actions = (
        rng.integers(0, act_dim, (n, b)).astype(np.int64)
        if network.type == "dqn_mlp"
        else rng.uniform(-1, 1, (n, b, act_dim)).astype(np.float32)
    )
    return ReplayBatch(f(n, b, obs_dim), actions, f(n, b), f(n, b, obs_dim), np.zeros((n, b), np.float32))


def _steps_per_cycle(cfg: Any) -> int:
    """Gradient steps after which the step's work repeats: TD3 updates its actor every policy_delay."""
    return int(getattr(cfg, "policy_delay", 1))


def step_matmuls(algo: str, env_id: str) -> tuple[list[Matmul], int]:
    """Every matmul of one cycle of gradient steps of the torch agent on the preset's shapes, and the
    cycle's length in gradient steps."""
    from torch.utils._python_dispatch import TorchDispatchMode

    agent, cfg, network = _agent("torch", algo, env_id, {})
    cycle = _steps_per_cycle(cfg)
    batch = _batch(network, cfg, 1, np.random.default_rng(0))
    for _ in range(2 * cycle):  # past the first steps' lazy state (Adam's moments)
        agent.train(batch)
    calls: list[Matmul] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = func.overloadpacket.__name__
            if name in _MATMUL_LIKE:
                raise RuntimeError(
                    f"{algo}'s gradient step calls aten.{name}, which the roofline does not replay"
                )
            if name in _REPLAYED:
                a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
                calls.append(
                    Matmul(
                        a.shape[0],
                        a.shape[1],
                        b.shape[1],
                        _transposed(tuple(a.shape), a.stride()),
                        _transposed(tuple(b.shape), b.stride()),
                        name == "addmm",
                    )
                )
            return func(*args, **(kwargs or {}))

    with Record():
        for _ in range(cycle):
            agent.train(batch)
    return calls, cycle


def _best_of(fn: Any, reps: int, rounds: int = 3) -> float:
    """The best of `rounds` mean times of `reps` calls (seconds per call): the machine's noise only slows."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def replay_seconds(library: str, calls: list[Matmul], reps: int = 50) -> float:
    """Seconds to run the recorded matmuls back to back, each on its own operands (no two calls share an
    input, so nothing can be computed once for two), in torch eager or in one TF graph (tf.function)."""
    rng = np.random.default_rng(1)

    def operand(rows: int, cols: int, transposed: bool) -> np.ndarray:
        """A [rows, cols] operand's contiguous base: [cols, rows] where the call sees a transposed view."""
        return rng.standard_normal((cols, rows) if transposed else (rows, cols)).astype(np.float32)

    ops = [
        (operand(c.m, c.k, c.a_t), operand(c.k, c.n, c.b_t), rng.standard_normal(c.n).astype(np.float32))
        for c in calls
    ]
    if library == "torch":
        import torch

        t = [(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(v)) for a, b, v in ops]
        # a transposed operand is the .t() view of its contiguous base, as autograd hands it to MKL
        args = [
            (a.t() if c.a_t else a, b.t() if c.b_t else b, v) for c, (a, b, v) in zip(calls, t, strict=True)
        ]

        def run() -> None:
            for c, (a, b, v) in zip(calls, args, strict=True):
                torch.addmm(v, a, b) if c.bias else torch.mm(a, b)

        return _best_of(run, reps)
    if library == "tensorflow":
        import tensorflow as tf

        flat = [tf.constant(x) for abv in ops for x in abv]
        spec = [tf.TensorSpec(x.shape, tf.float32) for x in flat]

        def matmuls(*xs: Any) -> list[Any]:
            out = []
            for i, c in enumerate(calls):
                a, b, v = xs[3 * i : 3 * i + 3]
                y = tf.linalg.matmul(a, b, transpose_a=c.a_t, transpose_b=c.b_t)
                out.append(tf.nn.bias_add(y, v) if c.bias else y)
            return out

        def same_call(*xs: Any) -> list[Any]:
            return [tf.identity(xs[3 * i]) for i in range(len(calls))]

        # A graph, as TF's off-policy training phase runs (a tf.function, not XLA), called as a concrete
        # function as the agent calls it; a call's own cost (some 0.1-0.4 ms here, paid once per training
        # phase, not per matmul) is measured with the same inputs and outputs and no matmuls, and taken off.
        run, null = (
            tf.function(f, input_signature=spec).get_concrete_function() for f in (matmuls, same_call)
        )
        return max(0.0, _best_of(lambda: run(*flat), reps) - _best_of(lambda: null(*flat), reps))
    raise ValueError(f"library {library!r}: torch or tensorflow")


def gradient_step_seconds(framework: str, algo: str, env_id: str, net_arch: list[int] | None = None) -> float:
    """Seconds per gradient step of the agent's own `train` call (what the driver calls once per training
    phase: tensors in, every gradient step of the phase, stats out), on random batches."""
    overrides = {"net_arch": net_arch} if net_arch else {}
    agent, cfg, network = _agent(framework, algo, env_id, overrides)
    per_phase = int(cfg.gradient_steps if cfg.gradient_steps > 0 else cfg.train_freq)
    n = max(per_phase, _steps_per_cycle(cfg))
    batch = _batch(network, cfg, n, np.random.default_rng(0))
    for _ in range(3):  # TF traces and compiles on the first call
        agent.train(batch)
    reps = max(1, 60 // n)
    return _best_of(lambda: agent.train(batch), reps) / n


def measure(framework: str, algo: str, env_id: str, calls: list[Matmul] | None) -> dict[str, Any]:
    """The roofline's figures for one framework, in this process: its matmul replay, gradient step and
    narrow-net gradient step (torch also records the step's matmuls)."""
    cycle = None
    if calls is None:
        calls, cycle = step_matmuls(algo, env_id)
    from rl2edge.train.algos import build_config

    cycle = cycle or _steps_per_cycle(build_config(env_id, overrides={}, algo=algo))
    library = "tensorflow" if framework == "tf" else "torch"
    return {
        "framework": framework,
        "library": library,
        "matmuls": [asdict(c) for c in calls],
        "cycle": cycle,
        "gflop_per_gradient_step": sum(c.flops for c in calls) / cycle / 1e9,
        "matmul_s": replay_seconds(library, calls) / cycle,
        "step_s": gradient_step_seconds(framework, algo, env_id),
        "narrow_step_s": gradient_step_seconds(framework, algo, env_id, NARROW),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=("torch", "tf"), required=True)
    ap.add_argument("--algo", required=True, choices=("sac", "td3", "dqn"))
    ap.add_argument("--env", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--matmuls", help="JSON file of the recorded matmuls (else recorded here, with torch)")
    ap.add_argument(
        "--matmul-precision",
        default="highest",
        choices=("highest", "medium"),
        help="torch only: medium replays the matmuls and times the step with bfloat16 products "
        "(train --matmul-precision medium); the library is then reported as torch-bf16",
    )
    args = ap.parse_args(argv)
    if args.framework == "tf" and args.matmul_precision != "highest":
        ap.error("--matmul-precision is torch's")
    from rl2edge.train.core.threads import set_cpu_threads

    set_cpu_threads(args.threads)
    if args.framework == "tf":  # before TF's first op (the matmul replay may come before any agent)
        from rl2edge.train.tf_backend.setup import configure_tensorflow

        configure_tensorflow("cpu")
    else:
        import torch

        torch.set_num_threads(args.threads)
        torch.set_float32_matmul_precision(args.matmul_precision)  # this process's every matmul
    calls = [Matmul(**c) for c in json.loads(Path(args.matmuls).read_text())] if args.matmuls else None
    fig = measure(args.framework, args.algo, args.env, calls)
    if args.matmul_precision == "medium":
        fig["library"] = "torch-bf16"
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
