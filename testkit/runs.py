"""Run directories as tests handle them: tiny real training runs (`tiny_train`) and their exports (`export_run`,
`build_artifacts`: the fixtures' artifacts of tests/conftest.py), a deliberately wrong copy, and their weights
compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def flipped_run(run: Path, out: Path) -> Path:
    """A copy of a discrete-action run whose actor's last layer is negated: the same specs, the opposite
    preference at every observation (argmax of -logits), so it disagrees with the original everywhere
    but at exact ties. What a wrong artifact with the right shape looks like."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    from rl2edge.fileio import sha256_file

    shutil.copytree(run, out)
    ckpt = json.loads((out / "checkpoint.json").read_text())
    weights_file = out / ckpt["weights"]["file"]
    weights = load_file(weights_file)
    last = max(int(k.split(".")[1]) for k in weights if k.startswith("actor.") and k.endswith(".weight"))
    for kind in ("weight", "bias"):
        weights[f"actor.{last}.{kind}"] = -weights[f"actor.{last}.{kind}"]
    save_file(weights, str(weights_file))
    ckpt["weights"]["sha256"] = sha256_file(weights_file)
    (out / "checkpoint.json").write_text(json.dumps(ckpt, indent=2))
    return out


def checkpoint_weights(run: Path) -> dict[str, np.ndarray]:
    """A run directory's weights as arrays by name, for either framework's file (the TF .h5 file's bytes
    differ between identical weights: it records object ids; its arrays do not)."""
    if (run / "policy.safetensors").is_file():
        from safetensors.numpy import load_file

        return dict(load_file(run / "policy.safetensors"))
    import h5py

    out: dict[str, np.ndarray] = {}
    with h5py.File(run / "policy.weights.h5") as f:
        f.visititems(
            lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None
        )
    return out


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = checkpoint_weights(a), checkpoint_weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        assert np.array_equal(wa[k], wb[k]), f"{k}: max |diff| {np.abs(wa[k] - wb[k]).max()}"


def tiny_train(
    env_id: str,
    out: Path,
    steps: int,
    seed: int = 0,
    algo: str = "ppo",
    framework: str = "torch",
    **overrides: object,
) -> Path:
    """A short real training run of `algo` on `env_id` into `out`: `steps` env steps, no periodic
    evaluation, the preset and `overrides` otherwise."""
    from rl2edge.train.algos import build_config, train

    cfg = build_config(
        env_id, overrides={"n_timesteps": steps, "eval_freq": 0, "eval_episodes": 2, **overrides}, algo=algo
    )
    out.mkdir(parents=True, exist_ok=True)
    train(framework, env_id, cfg, seed, out, device="cpu", progress=False)
    return out


# A2C (torch, the ONNX route) and Rainbow with every component on (TF, the SavedModel route), briefly
# trained on CartPole: what the closed-loop serve test runs as int8 files.
A2C_RUN = dict(algo="a2c", framework="torch", steps=8000)
RAINBOW_RUN = dict(algo="rainbow", framework="tf", steps=3000, learning_starts=500)
# The AGV example's Dict env (examples/agv), briefly trained: what the Dict PLC tests serve.
AGV_RUN = dict(env_id="examples.agv:AgvDictEnv", steps=2048)


def export_run(run: Path, out: Path, quantize: str):
    """`run` exported in `quantize` (a mode or "all") to `out`, briefly calibrated and evaluated: the report."""
    from rl2edge.export.pipeline import ExportOptions, export_path

    return export_path(
        run, out, ExportOptions(quantize=quantize, calib_episodes=3, eval_episodes=2, progress=False)
    )


def build_artifacts(out: Path) -> None:
    """The artifacts of tests/conftest.py's fixtures, for the edge test run ($RL2EDGE_TEST_ARTIFACTS):
    out/cartpole-all/<mode>, out/cartpole-flipped, out/pendulum-{fp32,int8}, out/a2c-int8, out/rainbow-int8,
    out/agv-dict-fp32."""
    cp = tiny_train("CartPole-v1", out / "runs" / "cartpole", steps=4096)
    pd = tiny_train(
        "Pendulum-v1", out / "runs" / "pendulum", steps=2048, n_envs=2, n_steps=512, batch_size=256
    )
    export_run(cp, out / "cartpole-all", "all")
    export_run(flipped_run(cp, out / "runs" / "cartpole-flipped"), out / "cartpole-flipped", "fp32")
    export_run(pd, out / "pendulum-fp32", "fp32")
    export_run(pd, out / "pendulum-int8", "int8")
    export_run(tiny_train("CartPole-v1", out / "runs" / "a2c", **A2C_RUN), out / "a2c-int8", "int8")
    export_run(
        tiny_train("CartPole-v1", out / "runs" / "rainbow", **RAINBOW_RUN), out / "rainbow-int8", "int8"
    )
    export_run(tiny_train(out=out / "runs" / "agv", **AGV_RUN), out / "agv-dict-fp32", "fp32")
