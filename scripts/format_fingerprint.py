"""Fingerprints of the file formats: train every algorithm on every env of its preset with both backends
(tiny runs), export one fp32 artifact per algorithm and backend, and write one JSON of what came out:
checkpoint.json and manifest.json as parsed JSON (wall-clock fields dropped) and the sha256 of every
weight and model file. Two trees that write the same formats from the same seeds give equal files:

    python scripts/format_fingerprint.py --out /tmp/fp-before.json      # on the old tree
    python scripts/format_fingerprint.py --out /tmp/fp-after.json       # on the new one
    python scripts/format_fingerprint.py --compare /tmp/fp-before.json /tmp/fp-after.json

A structural change (renamed modules, moved behaviour) must leave the two equal: the seeds' draw order,
the checkpoint and the manifest contracts are the same. About 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

# What differs between two exports of the same checkpoint: export's latency probe (checkpoint.json holds no
# clock: summary.json, which does, is not fingerprinted).
VOLATILE = {"predict_latency_us"}
# Small runs that still take gradient steps, update targets and normalize.
TINY = {
    "learning_starts": 100,
    "buffer_size": 5000,
    "batch_size": 32,
    "n_steps": 16,
    "n_epochs": 2,
    "eval_freq": 100000,
    "eval_episodes": 2,
    "target_update_interval": 50,
}
STEPS = 500
# Rows beyond the presets' (algo, env, config overrides, export options): the forms a structural change
# could reach without any preset showing it (Dict observations, a frame stack, a GRU, folded noise, an
# action-rate limit). Trained with the torch and TF backends, each exported.
EXTRA: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("ppo", "testkit.dict_envs:DictCartPole", {}, []),
    ("sac", "testkit.dict_envs:DictPendulum", {}, ["--noise", "gaussian:sigma=0.1"]),
    ("td3", "Pendulum-v1", {}, ["--noise", "ou:theta=0.15,sigma=0.2"]),
    ("ppo", "CartPole-v1", {"frame_stack": 4}, []),
    ("ppo_lstm", "CartPoleNoVel-v1", {"rnn_type": "gru"}, []),
    (
        "ppo_lstm",
        "testkit.dict_envs:DictPendulum",
        {"n_envs": 2},
        ["--max-action-rate", "1", "--period-ms", "50"],
    ),
    ("a2c", "Pendulum-v1", {}, ["--max-action-rate", "2", "--period-ms", "20"]),
]


def _strip(obj: Any) -> Any:
    """Wall-clock fields dropped; absolute paths (the runs' temporary directory) reduced to their name."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    if isinstance(obj, str) and obj.startswith("/"):
        return Path(obj).name
    return obj


def _digest(directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in sorted(directory.iterdir()):
        if f.suffix == ".json" and f.name != "summary.json":
            out[f.name] = _strip(json.loads(f.read_text()))
        elif f.suffix in (".safetensors", ".tflite", ".onnx", ".npz"):
            out[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _rows() -> list[tuple[str, str]]:
    from rl2edge.train.algos import ALGOS

    presets = Path(__file__).resolve().parents[1] / "train" / "presets"
    return [(name, env) for name in ALGOS for env in yaml.safe_load((presets / f"{name}.yml").read_text())]


def _config(algo: str, path: Path, extra: dict[str, Any] | None = None) -> None:
    from rl2edge.train.algos import get

    fields = {f.name for f in dataclasses.fields(get(algo).config_class())}
    path.write_text(yaml.safe_dump({k: v for k, v in {**TINY, **(extra or {})}.items() if k in fields}))


def _train(exe: str, work: Path, algo: str, fw: str, env: str, cfg: Path, tag: str) -> Path:
    run = work / f"{algo}-{fw}-{tag}"
    cmd = [exe, "train", "--algo", algo, "--framework", fw, "--env", env, "--steps", str(STEPS)]
    cmd += ["--config", str(cfg), "--out", str(run), "--no-progress"]
    _run(cmd)
    return run


def _run(cmd: list[str]) -> None:
    """A command of the fingerprint; one that fails stops it with the command's own message."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}\nexited {proc.returncode}: {proc.stderr[-2000:]}")


def _export(exe: str, source: Path, art: Path, options: list[str]) -> None:
    cmd = [exe, "export", str(source), "--quantize", "fp32", "--out", str(art), "--calib-episodes", "2"]
    cmd += ["--eval-episodes", "2", "--no-progress", *options]
    _run(cmd)


def _sb3(work: Path) -> dict[str, Any]:
    """An SB3 PPO model trained by SB3 itself (seeded), with VecNormalize, exported from its .zip."""
    script = (
        "from stable_baselines3 import PPO\n"
        "from stable_baselines3.common.env_util import make_vec_env\n"
        "from stable_baselines3.common.vec_env import VecNormalize\n"
        "import sys, torch\n"
        "torch.set_num_threads(1)\n"
        "env = VecNormalize(make_vec_env('Pendulum-v1', n_envs=2, seed=0))\n"
        "model = PPO('MlpPolicy', env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device='cpu')\n"
        "model.learn(256)\n"
        "model.save(sys.argv[1] + '/model.zip'); env.save(sys.argv[1] + '/vecnormalize.pkl')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(work)], check=True, capture_output=True)
    art = work / "art-sb3"
    _export(
        str(Path(sys.executable).with_name("rl2edge")),
        work / "model.zip",
        art,
        ["--env", "Pendulum-v1", "--vecnormalize", str(work / "vecnormalize.pkl")],
    )
    return _digest(art)


def collect(work: Path) -> dict[str, Any]:
    exe = str(Path(sys.executable).with_name("rl2edge"))
    result: dict[str, Any] = {}
    exported: set[tuple[str, str]] = set()
    for algo, env in _rows():
        cfg = work / f"{algo}.yml"
        _config(algo, cfg)
        for fw in ("torch", "tf"):
            run = _train(exe, work, algo, fw, env, cfg, env)
            result[f"train {algo} {fw} {env}"] = _digest(run)
            print(f"train {algo} {fw} {env}", flush=True)
            if (algo, fw) in exported:
                continue
            exported.add((algo, fw))
            _export(exe, run, work / f"art-{algo}-{fw}", [])
            result[f"export {algo} {fw} {env}"] = _digest(work / f"art-{algo}-{fw}")
            print(f"export {algo} {fw} {env}", flush=True)
    for i, (algo, env, overrides, options) in enumerate(EXTRA):
        cfg = work / f"extra{i}.yml"
        _config(algo, cfg, overrides)
        tag = f"{env} {overrides or ''} {' '.join(options)}".strip()
        for fw in ("torch", "tf"):
            run = _train(exe, work, algo, fw, env, cfg, f"extra{i}")
            result[f"train {algo} {fw} {tag}"] = _digest(run)
            _export(exe, run, work / f"art-extra{i}-{fw}", options)
            result[f"export {algo} {fw} {tag}"] = _digest(work / f"art-extra{i}-{fw}")
            print(f"extra {algo} {fw} {tag}", flush=True)
    result["export sb3 ppo Pendulum-v1 vecnormalize"] = _sb3(work)
    print("sb3", flush=True)
    return result


def _without_input_dates(result: dict[str, Any]) -> dict[str, Any]:
    """The SB3 row's model.zip is made afresh by each run, and a zip records its entries' write times: its
    sha256 in the manifest's source section differs between runs of the same tree. Dropped from both."""
    for key, files in result.items():
        if key.startswith("export sb3"):
            files.get("manifest.json", {}).get("source", {}).pop("sha256", None)
    return result


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    diffs = [f"only in the first: {k}" for k in a if k not in b] + [
        f"only in the second: {k}" for k in b if k not in a
    ]
    for key in a.keys() & b.keys():
        for name in a[key].keys() | b[key].keys():
            if a[key].get(name) != b[key].get(name):
                diffs.append(f"{key}: {name} differs")
    return sorted(diffs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path)
    args = p.parse_args()
    if args.compare:
        diffs = compare(*(_without_input_dates(_strip(json.loads(f.read_text()))) for f in args.compare))
        print("\n".join(diffs) if diffs else "equal")
        return 1 if diffs else 0
    if not args.out:
        p.error("--out or --compare")
    with tempfile.TemporaryDirectory() as tmp:
        result = collect(Path(tmp))
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"{len(result)} fingerprints in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
