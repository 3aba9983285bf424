"""`rl2edge export`: checkpoint -> verified artifact(s), written atomically.

Order: rebuild the deployable policy; collect calibration and held-out observations by running it in its
env; export ONNX and check it against the source; convert with onnx2tf; make each TFLite file, write it
as an artifact, load it back through the runtime, and verify it there (fp32 must match the source within
tolerance, or the export fails and nothing is written); record every figure in the manifest.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from export.calibration import collect_rollout_data
from export.deployable import DeployablePolicy, build_deployable, folded_description, torch_act
from export.onnx_export import INPUT_NAME, OPSET, OUTPUT_NAME, export_onnx
from export.report import ExportReport, FileRow
from export.tflite_convert import MODES, convert, onnx_to_saved_model
from export.tolerances import DEFAULT, Tolerances
from export.verify import compare_actions, latency_us, require_fp32_parity
from rl2edge.errors import ConfigError
from rl2edge.fileio import atomic_directory, check_output_dir, write_bytes_atomic, write_json_atomic
from runtime.interpreters import OnnxBackend
from runtime.manifest import write_manifest
from runtime.policy import Policy
from train.core.checkpoint import Checkpoint, load_checkpoint
from train.core.envs import check_env_id
from train.core.evaluation import evaluate

_logger = logging.getLogger(__name__)

TOOLS = ("rl2edge", "torch", "onnx", "onnxruntime", "onnx2tf", "tensorflow", "ai-edge-litert", "numpy")


@dataclass(frozen=True)
class ExportOptions:
    quantize: str = "int8"
    """A mode of MODES, or 'all' for one artifact per mode in <out>/<mode>/."""
    calib_episodes: int = 10
    eval_episodes: int = 10
    seed: int = 0
    force: bool = False
    progress: bool | None = None
    tolerances: Tolerances = field(default_factory=lambda: DEFAULT)


def _versions() -> dict[str, str]:
    out = {}
    for name in TOOLS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _source_outputs(policy: DeployablePolicy, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    with torch.no_grad():
        x = torch.as_tensor(obs)
        actions = policy(x).numpy()
        margins = None
        if policy.discrete:
            top2 = torch.topk(policy.pre_head(x), 2, dim=-1).values
            margins = (top2[:, 0] - top2[:, 1]).numpy()
    return actions, margins


def _ret(result: Any) -> dict[str, Any]:
    return {"mean_return": result.mean, "std_return": result.std, "returns": result.returns}


def export_checkpoint(run_dir: Path, out: Path | None, opts: ExportOptions) -> ExportReport:
    if opts.quantize != "all" and opts.quantize not in MODES:
        raise ConfigError(f"--quantize {opts.quantize!r}: choose one of {', '.join(MODES)} or all")
    if opts.calib_episodes < 1 or opts.eval_episodes < 1:
        raise ConfigError("--calib-episodes and --eval-episodes must be at least 1")
    ckpt = load_checkpoint(run_dir)
    check_env_id(ckpt.env_id)
    out = out or Path("artifacts") / run_dir.resolve().name
    check_output_dir(out, force=opts.force, what="export")
    modes = list(MODES) if opts.quantize == "all" else [opts.quantize]
    start = time.perf_counter()

    stages = ["rollouts", "onnx", "onnx2tf", *dict.fromkeys(["fp32", *modes])]
    bar = tqdm(
        total=len(stages),
        desc="export",
        unit="stage",
        disable=None if opts.progress is None else not opts.progress,
        leave=False,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="rl2edge-export-") as tmp, atomic_directory(out) as staging:
            work = Path(tmp)
            report = _export(ckpt, modes, opts, work, staging, out, bar)
            if opts.quantize == "all":
                report.wall_time_s = time.perf_counter() - start
                write_json_atomic(staging / "report.json", report.to_json())
                write_bytes_atomic(staging / "report.md", (report.table() + "\n").encode())
    finally:
        bar.close()
    report.wall_time_s = time.perf_counter() - start
    return report


def _export(
    ckpt: Checkpoint, modes: list[str], opts: ExportOptions, work: Path, staging: Path, out: Path, bar: Any
) -> ExportReport:
    tol, env_id, meta = opts.tolerances, ckpt.env_id, ckpt.meta
    obs_shape = tuple(meta["observation_space"]["shape"])
    policy, norm = build_deployable(ckpt)
    act = torch_act(policy)

    bar.set_description("export: rollouts of the trained policy")
    data = collect_rollout_data(
        act, env_id, opts.calib_episodes, opts.seed, tol.calibration_max_samples, tol.heldout_max_samples
    )
    source_actions, margins = _source_outputs(policy, data.heldout)
    source_return = _ret(evaluate(act, env_id, opts.eval_episodes, opts.seed))
    bar.update()

    bar.set_description("export: ONNX")
    onnx_path = work / "policy.onnx"
    export_onnx(policy, obs_shape, onnx_path)
    onnx_backend = OnnxBackend(onnx_path, num_threads=1)
    onnx_actions = np.stack([onnx_backend.run(o[None])[0] for o in data.heldout])
    onnx_parity = compare_actions(source_actions, onnx_actions, policy.discrete, margins, tol)
    require_fp32_parity("policy.onnx", onnx_parity, tol)
    bar.update()

    bar.set_description("export: onnx2tf")
    saved_model = onnx_to_saved_model(onnx_path, work / "saved_model")
    bar.update()

    report = ExportReport(out, env_id, modes, source_return, onnx_parity)
    common = {
        "source": {
            "checkpoint": str(ckpt.path),
            "checkpoint_sha256": ckpt.content_hash(),
            "algo": ckpt.algo,
            "framework": ckpt.framework,
            "env_id": env_id,
            "seed": meta.get("seed"),
            "total_timesteps": meta.get("total_timesteps"),
        },
        "observation": {**meta["observation_space"], "layout": "flat", "model_input_shape": [1, *obs_shape]},
        "action": meta["action_space"],
        "folded": folded_description(norm, meta["action_space"]),
        "onnx": {"file": "policy.onnx", "opset": OPSET, "input": INPUT_NAME, "output": OUTPUT_NAME},
        "tools": _versions(),
    }
    fp32_row: FileRow | None = None
    for mode in dict.fromkeys(["fp32", *modes]):
        bar.set_description(f"export: TFLite {mode}")
        if mode in modes:
            art = staging / mode if len(modes) > 1 else staging
        else:
            art = work / "fp32"  # built for verification and as the baseline, not shipped
        art.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(art / "policy.tflite", convert(saved_model, mode, data.calibration))
        shutil.copyfile(onnx_path, art / "policy.onnx")
        calibration = dict(data.description) if mode == "int8" else None
        manifest_data = {
            **common,
            "model": {"file": "policy.tflite", "format": "tflite"},
            "quantization": {"mode": mode, "calibration": calibration},
        }
        write_manifest(art, manifest_data)

        # Verify through the runtime, the code that will serve this file on the device.
        served = Policy.load(art)
        backend = served._backend
        manifest_data["model"].update(
            {
                "input": {
                    "name": backend.input_name,
                    "shape": list(backend.input_shape),
                    "dtype": str(backend.input_dtype),
                    "quantization": _q(backend.input_quant),
                },
                "output": {
                    "name": backend.output_name,
                    "dtype": str(backend.output_dtype),
                    "quantization": _q(backend.output_quant),
                },
            }
        )
        actions = np.stack([np.asarray(served.predict(o)) for o in data.heldout])
        parity = compare_actions(
            source_actions, actions.reshape(source_actions.shape), policy.discrete, margins, tol
        )
        if mode == "fp32":
            require_fp32_parity(f"policy.tflite ({mode})", parity, tol)
        closed = _ret(evaluate(served.predict, env_id, opts.eval_episodes, opts.seed))
        latency = latency_us(served.predict, data.heldout)
        row = FileRow(
            mode,
            (out / art.relative_to(staging) / "policy.tflite")
            if art.is_relative_to(staging)
            else Path("(verification only)"),
            (art / "policy.tflite").stat().st_size,
            parity,
            closed,
            latency,
        )
        if mode == "fp32":
            fp32_row = row
        assert fp32_row is not None  # fp32 is always first
        manifest_data["verification"] = {
            "tolerances": tol.to_json(),
            "heldout": data.description["heldout"],
            "onnx_vs_source": onnx_parity,
            "tflite_vs_source": parity,
            "closed_loop": {
                "env_id": env_id,
                "episodes": opts.eval_episodes,
                "seeds_from": opts.seed,
                "this_file": closed,
                "fp32": fp32_row.closed_loop,
                "source": source_return,
            },
            "predict_latency_us": latency,
        }
        write_manifest(art, manifest_data)
        if mode in modes:
            report.rows.append(row)
        _logger.info(
            "%s: %s, return %.1f (fp32 %.1f)",
            mode,
            parity,
            closed["mean_return"],
            fp32_row.closed_loop["mean_return"],
        )
        bar.update()
    return report


def _q(q: tuple[float, int] | None) -> dict[str, float] | None:
    return None if q is None else {"scale": q[0], "zero_point": q[1]}
