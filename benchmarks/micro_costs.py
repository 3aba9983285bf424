"""Small costs that design choices in the code rest on, measured side by side in one run (the comments
that cite them point here, rather than carrying figures that go stale):

- torch PPO's gradient step on CartPole's 64x64 nets, one minibatch of 256: the written-out gradient
  (ActorCriticGrad, the default), eager autograd, and `train --compile` (torch.compile, its compile time
  apart), each with fused Adam;
- one call of a small TensorFlow graph (tf.function), the per-call overhead that makes TF's PPO run all of
  an update's minibatches in one XLA call;
- a Dict observation of 4 keys made into the model's vector: `runtime.Policy`'s fill key by key against
  the generic `ObservationSpec.flatten`;
- a Discrete action clamped to its range: Python ints against np.clip.

    python benchmarks/micro_costs.py [--repeats 5] [--out benchmarks/results]

Writes micro_costs.{json,md,png}. Medians of `--repeats` rounds; each round times a loop of calls.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results


def _per_call_us(fn: Callable[[], Any], calls: int, repeats: int) -> float:
    fn()  # warm
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def _ppo_steps(repeats: int, steps: int) -> dict[str, float]:
    import torch

    from rl2edge.train.core.rollout import Minibatch
    from testkit.agents import make_agent, network

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    mb = Minibatch(f(256, 4), rng.integers(0, 2, 256), f(256) - 0.7, f(256), f(256), f(256))
    spec = network("ppo", 4, 2, discrete=True, net_arch=[64, 64], activation="tanh")
    out: dict[str, float] = {}
    for mode in ("written_out", "autograd", "compiled"):
        agent = make_agent("ppo", "torch", spec, "CartPole-v1")
        if mode == "autograd":
            agent.autograd = True
        if mode == "compiled":
            t0 = time.perf_counter()
            agent.compile_update()
            agent.train_minibatches([mb], 0.2)  # the first call compiles
            out["compile_s"] = time.perf_counter() - t0
        out[f"ppo_step_{mode}_us"] = _per_call_us(
            lambda a=agent: a.train_minibatches([mb], 0.2), steps, repeats
        )
    return out


def _tf_call(repeats: int, calls: int) -> dict[str, float]:
    import tensorflow as tf

    w = tf.constant(np.ones((4, 2), np.float32))
    graph = tf.function(lambda x: tf.matmul(x, w), input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    x = tf.constant(np.ones((1, 4), np.float32))
    return {"tf_function_call_us": _per_call_us(lambda: graph(x), calls, repeats)}


def _dict_fill(repeats: int, calls: int) -> dict[str, float]:
    from rl2edge.specs import ObservationKey, ObservationSpec

    keys = [ObservationKey(n, (s,)) for n, s in (("lidar", 24), ("imu", 6), ("goal", 3), ("speed", 1))]
    spec = ObservationSpec.of_keys(keys)
    obs = {k.name: np.ones(k.shape, np.float32) for k in keys}
    slices = spec.key_slices

    def fill() -> np.ndarray:  # runtime.Policy's: a fresh vector, key by key into its slice
        x = np.empty(spec.size, np.float32)
        for name, part in slices:
            x[part] = obs[name]
        return x

    return {
        "dict_fill_key_by_key_us": _per_call_us(fill, calls, repeats),
        "dict_flatten_generic_us": _per_call_us(lambda: spec.flatten(obs), calls, repeats),
    }


def _clamp(repeats: int, calls: int) -> dict[str, float]:
    y = np.array([[3]], np.int64)
    return {
        "discrete_clamp_python_us": _per_call_us(lambda: min(max(int(y.flat[0]), 0), 1), calls, repeats),
        "discrete_clamp_np_clip_us": _per_call_us(lambda: int(np.clip(y.flat[0], 0, 1)), calls, repeats),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the default calls per round")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    n = lambda calls: max(1, int(calls * args.scale))  # noqa: E731
    figures: dict[str, float] = {}
    figures |= _ppo_steps(args.repeats, n(200))
    figures |= _tf_call(args.repeats, n(2000))
    figures |= _dict_fill(args.repeats, n(20000))
    figures |= _clamp(args.repeats, n(50000))
    rows = [[name, f"{value:.3g}"] for name, value in figures.items()]
    md = (
        "# Micro costs\n\nMedians of "
        f"{args.repeats} rounds, one thread, this machine (`python benchmarks/micro_costs.py`).\n\n"
        + markdown_table(["what", "figure (us; compile_s in s)"], rows)
    )
    data = {"repeats": args.repeats, "scale": args.scale, "figures": figures}
    write_results("micro_costs", data, md, args.out)
    plt = pyplot()
    if plt is not None:
        timed = {k: v for k, v in figures.items() if k.endswith("_us")}
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.barh(list(timed), list(timed.values()))
        ax.set_xscale("log")
        ax.set_xlabel("us per call (log)")
        save_figure(fig, args.out / "micro_costs.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
