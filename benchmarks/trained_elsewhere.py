"""Policies trained elsewhere, exported by rl2edge: each peer's file made by its own library's code
(rsl-rl's PPO and exporter: an MLP and an LSTM policy.onnx, and the MLP's checkpoint; a CleanRL-style agent
through the Python API with its NormalizeObservation statistics; a Keras model fitted by Keras and saved
with model.export), exported with `--quantize all`, and for each file: the max action error against the
source on the held-out observations, the closed-loop return next to fp32's, the size and predict p50.

    python benchmarks/trained_elsewhere.py [--iterations 10] [--out benchmarks/results]

Writes trained_elsewhere.{json,md,png}. A few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results

ENV = "Pendulum-v1"
BOX = {"shape": [3], "low": [-1.0, -1.0, -8.0], "high": [1.0, 1.0, 8.0]}
ACTION = {"type": "box", "low": [-2.0], "high": [2.0], "scale": "units"}


def _spec(work: Path, name: str, doc: dict[str, Any]) -> Path:
    import yaml

    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"spec": 1, "env": ENV, **doc}))
    return path


def _peers(work: Path, iterations: int, quick: bool = False) -> dict[str, Any]:
    """name -> (a source path and spec path for the CLI) or a callable exporting through the API."""
    import keras

    from testkit.cleanrl_style import train as train_cleanrl
    from testkit.observations import random_observations
    from testkit.rsl_rl_env import train_rsl_rl

    peers: dict[str, Any] = {}
    onnx_mlp, ckpt = train_rsl_rl(ENV, work / "rsl_mlp", iterations)
    spec = _spec(work, "rsl", {"observation": {**BOX, "input": "obs"}, "normalization": "in-graph",
                               "action": {**ACTION, "output": "actions"}})  # fmt: skip
    peers["rsl-rl MLP policy.onnx"] = (onnx_mlp, spec)
    if quick:
        return peers
    peers["rsl-rl MLP model.pt"] = (ckpt, spec)
    rnn = {"rnn_type": "lstm", "rnn_hidden_dim": 32, "rnn_num_layers": 1}
    onnx_lstm, _ = train_rsl_rl(ENV, work / "rsl_lstm", iterations, rnn=rnn)
    state = [{"input": "h_in", "output": "h_out"}, {"input": "c_in", "output": "c_out"}]
    spec_lstm = _spec(work, "rsl_lstm", {"observation": {**BOX, "input": "obs"}, "normalization": "in-graph",
                                         "action": {**ACTION, "output": "actions"}, "state": state})  # fmt: skip
    peers["rsl-rl LSTM policy.onnx"] = (onnx_lstm, spec_lstm)
    agent, mean, var = train_cleanrl(ENV, 3)
    peers["CleanRL-style agent (API)"] = (
        agent.actor_mean,
        {"spec": 1, "env": ENV, "observation": BOX, "action": ACTION,
         "normalization": {"mean": mean.tolist(), "var": var.tolist(), "layout": "gymnasium", "clip": 10}},
    )  # fmt: skip
    keras.utils.set_random_seed(0)
    obs = random_observations(ENV, 2000, seed=1).astype(np.float32)
    model = keras.Sequential(
        [keras.Input((3,), name="obs"), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    model.fit(obs, np.clip(-0.25 * obs[:, 2:3] - 0.5 * obs[:, 1:2], -1, 1), epochs=20, verbose=0)
    model.export(str(work / "keras_saved"), verbose=False)
    peers["Keras SavedModel"] = (
        work / "keras_saved",
        _spec(work, "keras", {"observation": {**BOX, "input": "obs"}, "normalization": "none",
                              "action": {**ACTION, "output": "output_0", "scale": "unit-range", "squash": "clip"}}),
    )  # fmt: skip
    return peers


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iterations", type=int, default=10, help="rsl-rl training iterations")
    p.add_argument("--quick", action="store_true", help="rsl-rl's MLP file alone (the smoke test's)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    from rl2edge.cli.app import main as cli
    from rl2edge.export.api import export_policy

    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        peers = _peers(work, args.iterations, args.quick)
        for name, (source, spec) in peers.items():
            art = work / f"art-{len(results)}"
            if isinstance(spec, dict):
                export_policy(source, spec, art, quantize="all", progress=False)
            else:
                argv_ = ["export", str(source), "--spec", str(spec), "--quantize", "all", "--out", str(art)]
                assert cli([*argv_, "--no-progress"]) == 0, name
            files = {}
            for mode in ("fp32", "fp16", "dynamic", "int8"):
                m = json.loads((art / mode / "manifest.json").read_text())
                v = m["verification"]
                files[mode] = {
                    "max_abs_error": v["tflite_vs_source"]["max_abs_error"],
                    "samples": v["tflite_vs_source"]["samples"],
                    "return": v["closed_loop"]["this_file"]["mean_return"],
                    "source_return": v["closed_loop"]["source"]["mean_return"],
                    "predict_p50_us": v["predict_latency_us"]["p50_us"],
                    "size_kb": (art / mode / "policy.tflite").stat().st_size / 1024,
                    "kind": m["source"]["kind"],
                }
                rows.append([name, mode, f"{files[mode]['max_abs_error']:.1e}", str(files[mode]["samples"]),
                             f"{files[mode]['source_return']:.1f}", f"{files[mode]['return']:.1f}",
                             f"{files[mode]['size_kb']:.1f}", f"{files[mode]['predict_p50_us']:.1f}"])  # fmt: skip
            results[name] = files
    md = (
        "# Policies trained elsewhere\n\nEach peer's file made by its own library's code, exported with "
        f"`--quantize all` ({ENV}; `python benchmarks/trained_elsewhere.py --iterations {args.iterations}`). "
        "Error: max |action - the source's action| on the held-out observations, the source run by its own "
        "runtime (onnxruntime, torch, TensorFlow). Returns over 10 episodes on the same seeds.\n\n"
        + markdown_table(
            ["source", "mode", "max error", "held-out", "source return", "file return", "KB", "p50 us"], rows
        )
    )
    data = {"env": ENV, "iterations": args.iterations, "results": results}
    write_results("trained_elsewhere", data, md, args.out)
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(8, 3.5))
        for i, (name, files) in enumerate(results.items()):
            ax.scatter([i] * 4, [max(f["max_abs_error"], 1e-9) for f in files.values()], label=name)
        ax.set_yscale("log")
        ax.set_xticks(range(len(results)), [n.split(" (")[0] for n in results], rotation=15, fontsize=7)
        ax.set_ylabel("max action error vs source (fp32..int8)")
        save_figure(fig, args.out / "trained_elsewhere.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
