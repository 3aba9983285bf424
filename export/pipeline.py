"""`rl2edge export`: an export source (export.sources: an rl2edge checkpoint, an SB3 model) -> verified
artifact(s), written atomically.

Order: open the source (export.source's contract); collect calibration and held-out observations by running it in its
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
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from rl2edge.errors import ConfigError, ExportError
from rl2edge.export.calibration import collect_rollout_data, observation_stats, pin_uint8_range
from rl2edge.export.degenerate import check_outputs
from rl2edge.export.graph_spec import (
    EPISODE_START,
    INPUT_NAME,
    NOISE_INPUT,
    OPSET,
    OU_CELL,
    OUTPUT_NAME,
    STATE_INPUT,
    folded_description,
    manifest_section,
    noise_states,
    state_section,
)
from rl2edge.export.noise_verify import check_noise_off, verify_distribution
from rl2edge.export.rate_limit import RateLimit, parse_rate_limit
from rl2edge.export.report import ExportReport, FileRow
from rl2edge.export.return_check import RULE as RETURN_RULE
from rl2edge.export.return_check import check_return
from rl2edge.export.source import ExportSource
from rl2edge.export.sources import SourceOptions, open_source
from rl2edge.export.tflite_convert import FLOAT_OPS, MODES, STATE_FLOAT_OPS, convert, uint8_input_saved_model
from rl2edge.export.tolerances import AUTO_LATENCY_TIE_PCT, DEFAULT, RETURN_DROP_WARNING_PCT, Tolerances
from rl2edge.export.verify import (
    compare_actions,
    latency_interleaved_us,
    latency_us,
    parity_summary,
    require_fp32_parity,
    top2_margins,
)
from rl2edge.fileio import atomic_directory, check_output_dir, write_bytes_atomic, write_json_atomic
from rl2edge.interrupts import check_interrupted
from rl2edge.runtime.interpreters import OnnxBackend, open_backend
from rl2edge.runtime.manifest import Manifest, load_manifest, write_manifest
from rl2edge.runtime.policy import Policy
from rl2edge.specs import NoiseSpec, ObservationSpec, ou_step, parse_noise
from rl2edge.tables import package_versions
from rl2edge.train.core.env_fit import check_fits_env
from rl2edge.train.core.envs import check_env_id
from rl2edge.train.core.evaluation import evaluate

_logger = logging.getLogger(__name__)

NO_CLOSED_LOOP = "no closed-loop check was possible: no env, recorded observations only (--observations)"
TOOLS = ("rl2edge", "torch", "onnx", "onnxruntime", "onnx2tf", "tensorflow", "ai-edge-litert", "numpy")
CHOICES = (*MODES, "all", "auto")


@dataclass(frozen=True)
class ExportOptions:
    quantize: str = "int8"
    """A mode of MODES; 'all' for one artifact per mode in <out>/<mode>/; 'auto' for the fastest mode whose
    closed-loop return stays within max_return_drop_pct of fp32's (export.return_check: % of the return's
    scale)."""
    calib_episodes: int = 10
    eval_episodes: int = 10
    seed: int = 0
    force: bool = False
    progress: bool | None = None
    max_return_drop_pct: float = 1.0
    noise: str | None = None
    """Exploration noise folded into the graph: gaussian:sigma=S, ou:theta=T,sigma=S[,dt=D] or policy."""
    noise_seed: int = 0
    """The seed the runtime's noise generator starts from (recorded in the manifest; overridable on the device)."""
    max_action_rate: str | None = None
    """An action-rate limit folded after the policy (export.rate_limit): action units per second, one rate
    or one per component (`0.5` or `0.5,2.0`), at `period_ms`."""
    period_ms: float | None = None
    """The control period `max_action_rate` is stated at: the plant's step period."""
    observations: Path | None = None
    """Recorded plant observations (export.observations_file) for calibration and the held-out parity
    check, in place of rollouts in an env; without an env no closed-loop return is measured."""
    allow_constant_output: bool = False
    """Export a source whose outputs are the same on every held-out observation (export.degenerate)."""
    tolerances: Tolerances = field(default_factory=lambda: DEFAULT)
    noise_spec: NoiseSpec | None = field(init=False, default=None, repr=False, compare=False)
    """`noise`, parsed: options are checked and parsed once, when they are made."""
    rate_limit: RateLimit | None = field(init=False, default=None, repr=False, compare=False)
    """`max_action_rate` at `period_ms`, parsed."""

    def __post_init__(self) -> None:
        self.check()
        object.__setattr__(self, "noise_spec", parse_noise(self.noise) if self.noise else None)
        if self.max_action_rate is not None:
            object.__setattr__(self, "rate_limit", parse_rate_limit(self.max_action_rate, self.period_ms))
        elif self.period_ms is not None:
            raise ConfigError("--period-ms states the period of --max-action-rate; give both, or neither")

    def check(self) -> None:
        if self.quantize not in CHOICES:
            raise ConfigError(f"--quantize {self.quantize!r}: choose one of {', '.join(CHOICES)}")
        if self.calib_episodes < 1 or self.eval_episodes < 1:
            raise ConfigError("--calib-episodes and --eval-episodes must be at least 1")
        if not 0 <= self.max_return_drop_pct <= 100:
            raise ConfigError(
                f"--max-return-drop must be a percentage in [0, 100], got {self.max_return_drop_pct}"
            )


def _ret(result: Any) -> dict[str, Any]:
    return {"mean_return": result.mean, "std_return": result.std, "returns": result.returns}


def default_out(source_path: Path) -> Path:
    """artifacts/<name>: a directory's name (a run named runs/cp.v2 keeps its .v2; a SavedModel's folder), or
    a model file's without its suffix (model.zip, policy.onnx, model_1500.pt)."""
    path = Path(source_path).resolve()
    return Path("artifacts") / (path.stem if path.is_file() else path.name)


def export_path(
    path: Path, out: Path | None, opts: ExportOptions, source_options: SourceOptions | None = None
) -> ExportReport:
    """Export whatever `path` holds (export.sources chooses its source: a run directory, an SB3 .zip)."""
    return export_source(open_source(path, source_options), out or default_out(path), opts)


def export_source(source: ExportSource, out: Path, opts: ExportOptions) -> ExportReport:
    if source.env_id is not None:
        check_env_id(source.env_id)
        check_fits_env(source.observation, source.action, source.env_id)
    elif opts.observations is None:
        raise ConfigError(
            "no env to run the policy in: give --env ENV_ID (or env: in the policy spec), or --observations FILE "
            "of recorded plant observations for calibration and the parity check"
        )
    elif opts.quantize == "auto":
        raise ConfigError(
            "--quantize auto keeps the fastest mode whose closed-loop return holds, and without an env there is "
            "no return: choose a mode, or give --env"
        )
    if opts.noise_spec is not None:
        if source.observation.layout != "flat":
            raise ExportError(
                "--noise is implemented for flat observations; image policies export without it"
            )
        source.fold_noise(opts.noise_spec)
    if opts.rate_limit is not None:
        source.limit_rate(opts.rate_limit)
    check_output_dir(out, force=opts.force, what="export")
    start = time.perf_counter()
    built = list(MODES) if opts.quantize in ("all", "auto") else list(dict.fromkeys(["fp32", opts.quantize]))
    bar = tqdm(
        total=3 + len(built),
        desc="export",
        unit="stage",
        disable=None if opts.progress is None else not opts.progress,
        leave=False,
    )
    try:
        with (
            tempfile.TemporaryDirectory(prefix="rl2edge-export-") as tmp,
            atomic_directory(out, completes=True) as staging,
        ):
            report = _export(source, built, opts, Path(tmp), staging, out, bar)
            if opts.quantize == "all":
                report.wall_time_s = time.perf_counter() - start
                write_json_atomic(staging / "report.json", report.to_json())
                write_bytes_atomic(staging / "report.md", (report.table() + "\n").encode())
            check_interrupted()  # a stop request swallowed by the converters: nothing is committed
    finally:
        bar.close()
    report.wall_time_s = time.perf_counter() - start
    return report


def _stage(bar: tqdm, text: str) -> None:
    """A new stage: stop here if a stop request arrived and was swallowed in the last one."""
    check_interrupted()
    bar.set_description(text)


def _shipped_dir(mode: str, opts: ExportOptions, work: Path, staging: Path) -> Path:
    if opts.quantize == "all":
        return staging / mode
    if opts.quantize == mode:
        return staging
    return work / mode  # verification only, or an auto candidate


@dataclass
class _Collected:
    """Stage 1: observations of the trained policy's own rollouts and what the source does on them."""

    data: Any
    """calibration and held-out observations (export.calibration.RolloutData)"""
    source_actions: np.ndarray
    margins: np.ndarray | None
    source_return: dict[str, Any] | None
    """None: no env, no closed loop."""
    noise_off: dict[str, Any] | None


def _export(
    source: ExportSource,
    built: list[str],
    opts: ExportOptions,
    work: Path,
    staging: Path,
    out: Path,
    bar: Any,
) -> ExportReport:
    """The stages, in order: collect; check the ONNX file (torch route); the SavedModel; for each mode make
    the file, verify it through the runtime and write its manifest (once); choose (auto)."""
    _stage(bar, "export: rollouts of the trained policy")
    got = _collect(source, opts)
    bar.update()
    _stage(bar, "export: ONNX")
    onnx_path, onnx_parity = _check_onnx(source, work, got, opts.tolerances)
    bar.update()
    _stage(bar, "export: SavedModel")
    saved_model = source.write_saved_model(work, onnx_path)
    # uint8 observations (image frames): the float files take them as they are, the cast inside the graph
    saved_uint8 = (
        uint8_input_saved_model(saved_model, work / "saved_model_uint8")
        if source.observation.dtype == "uint8" and source.noise is None and any(m != "int8" for m in built)
        else None
    )
    bar.update()

    report = ExportReport(
        out,
        source.env_id,
        [m for m in built if opts.quantize in ("all", "auto", m)],
        got.source_return,
        onnx_parity,
        source_name=source.reference_name,
    )
    common = _common_manifest(source, opts, onnx_path, got.noise_off)
    common["observation_stats"] = observation_stats(got.data.calibration, got.data.description["source"])
    manifests: dict[str, dict[str, Any]] = {}
    fp32_row: FileRow | None = None
    for mode in built:
        _stage(bar, f"export: TFLite {mode}")
        art = _shipped_dir(mode, opts, work, staging)
        manifest = {**common, **_make_file(source, mode, saved_model, saved_uint8, got, art, onnx_path)}
        shown = (
            out / art.relative_to(staging) / "policy.tflite"
            if art.is_relative_to(staging)
            else Path(f"({mode} candidate)")
        )
        row, verification = _verify_file(source, mode, art, manifest, got, opts, fp32_row, onnx_parity, shown)
        fp32_row = fp32_row or row  # fp32 is always built first
        manifest["verification"] = verification
        write_manifest(art, manifest)
        load_manifest(art)  # what the device will do first: the runtime's own schema and hash checks
        manifests[mode] = manifest
        if mode in report.modes:
            report.rows.append(row)
        bar.update()
    if opts.quantize == "auto":
        _choose(report, manifests, opts, work, staging, got.data.heldout)
    return report


def _collect(source: ExportSource, opts: ExportOptions) -> _Collected:
    tol = opts.tolerances
    if opts.observations is not None:  # recorded plant observations, in place of rollouts
        from rl2edge.export.observations_file import read_observations, recorded_data

        rows = read_observations(opts.observations, source.observation, bool(source.states))
        data = recorded_data(
            opts.observations, rows, tol.calibration_max_samples, tol.heldout_max_samples, bool(source.states)
        )
    else:
        assert source.env_id is not None  # export_source refuses neither
        data = collect_rollout_data(
            source.act,
            source.env_id,
            opts.calib_episodes,
            opts.seed,
            tol.calibration_max_samples,
            tol.heldout_max_samples,
            source.observation.flatten,
            on_reset=source.reset if source.states else None,
            min_calib=tol.calibration_min_samples,
            min_heldout=tol.heldout_min_samples,
        )
    if source.states:  # the held-out episodes in order, the state carried: per-step actions and margins
        assert data.heldout_starts is not None
        traj = source.trajectory(data.heldout, data.heldout_starts)
        actions = source.reference_trajectory(data.heldout, data.heldout_starts)
        margins = top2_margins(traj.pre_head, source.nvec) if source.categorical else None
        raw = traj.pre_head if source.categorical else actions
    else:
        actions, margins = source.reference_actions(data.heldout), source.margins(data.heldout)
        raw = source.pre_head(data.heldout) if source.categorical else actions
    box = None if source.categorical else (np.asarray(source.action.low), np.asarray(source.action.high))
    check_outputs(raw, source.categorical, opts.allow_constant_output, box)  # NaN or blind: refused here
    source_return = None
    if source.env_id is not None:
        source_return = _ret(
            evaluate(source.act, source.env_id, opts.eval_episodes, opts.seed, on_reset=source.reset)
        )
    return _Collected(
        data,
        actions,
        margins,
        source_return,
        check_noise_off(source, data.heldout, tol.noise_off_rtol) if source.noise is not None else None,
    )


def _check_onnx(
    source: ExportSource, work: Path, got: _Collected, tol: Tolerances
) -> tuple[Path | None, dict[str, Any] | None]:
    """The torch route's ONNX file, checked against the source within the fp32 tolerance; (None, None) on
    the TF route, which has no ONNX file."""
    onnx_path = work / "policy.onnx"
    if not source.write_onnx(onnx_path):
        return None, None
    backend = OnnxBackend(onnx_path, num_threads=1, observation_keys=_keys(source.observation))
    onnx_obs = source.onnx_input(got.data.heldout)
    if source.states:
        assert got.data.heldout_starts is not None
        actions = _run_sequence(backend, onnx_obs, got.data.heldout_starts, source)
    else:
        actions = np.stack([_run_deterministic(backend, o[None], source)[0] for o in onnx_obs])
    parity = compare_actions(got.source_actions, actions, source.categorical, got.margins, tol)
    require_fp32_parity("policy.onnx", parity, tol)
    return onnx_path, parity


def _common_manifest(
    source: ExportSource, opts: ExportOptions, onnx_path: Path | None, noise_off: dict[str, Any] | None
) -> dict[str, Any]:
    """What every file's manifest says alike: the source, the spaces, what is folded, the ONNX file, tools."""
    observation = source.observation.to_json()
    common: dict[str, Any] = {
        "source": source.description,
        # "layout" first, as manifests have always had it: the same export gives the same bytes
        "observation": {"layout": observation.pop("layout"), **observation},
        "action": source.action.to_json(),
        "folded": folded_description(source.norm, source.action, source.head),
        "onnx": {
            "file": "policy.onnx",
            "opset": OPSET,
            "input": list(_keys(source.observation)) or INPUT_NAME,  # a Dict: one input per key
            "output": OUTPUT_NAME,
            "input_layout": _graph_layout(source, onnx=True),
        }
        if onnx_path
        else None,
        "tools": package_versions(TOOLS, missing="not installed"),
    }
    if source.states:
        common["state"] = state_section(source.states, source.state_cell)
    elif noise_states(source.noise, source.act_dim):  # OU: its process state, on the same contract
        common["state"] = state_section(noise_states(source.noise, source.act_dim), OU_CELL)
    if source.noise is not None:
        common["folded"]["noise"] = {
            **manifest_section(source.noise, opts.noise_seed, source.act_dim),
            "off_equals_deterministic": noise_off,
        }
    if source.rate_limit is not None:
        common["folded"]["action_rate"] = source.rate_limit.to_json(source.act_dim)
    return common


def _make_file(
    source: ExportSource,
    mode: str,
    saved_model: Path,
    saved_uint8: Path | None,
    got: _Collected,
    art: Path,
    onnx_path: Path | None,
) -> dict[str, Any]:
    """Convert the SavedModel to `mode` into art/policy.tflite (with the ONNX file beside it); the
    manifest's model and quantization sections. `saved_uint8`: the same graph behind a uint8 input, which
    the float modes are made from where there is one (int8 has its own integer input)."""
    art.mkdir(parents=True, exist_ok=True)
    flat = source.observation.layout == "flat"
    if mode == "int8" and flat and not source.norm.enabled and not source.normalized_inside:
        _logger.warning(
            "int8 without observation normalization, folded or inside the model: raw observations of very different "
            "scales reach the int8 network through one per-tensor scale; normalize them (rl2edge train: normalize_obs, "
            "the default; a policy trained elsewhere: its statistics in the policy spec)"
        )
    calibration = got.data.calibration if flat else pin_uint8_range(got.data.calibration, source.observation)
    model = convert(
        saved_uint8 if saved_uint8 is not None and mode != "int8" else saved_model,
        mode,
        calibration,
        float_io_ops=flat,
        extra=_noise_calibration(source, got.data) or _state_calibration(source, got.data),
        observation_keys=source.observation.key_slices,
        extra_float_ops=STATE_FLOAT_OPS if source.states else (),
    )
    write_bytes_atomic(art / "policy.tflite", model)
    if onnx_path is not None:
        shutil.copyfile(onnx_path, art / "policy.onnx")
    quantization: dict[str, Any] = {
        "mode": mode,
        "calibration": dict(got.data.description) if mode == "int8" else None,
    }
    if mode == "int8" and flat:
        quantization["float_ops"] = {
            "ops": FLOAT_OPS + (STATE_FLOAT_OPS if source.states else []),
            "layers": "input and output layers in float32",
            "why": "normalization, the input and output layers and the action head in float32; the hidden layers in int8",
        }
    return {
        "model": {
            "file": "policy.tflite",
            "format": "tflite",
            "input": {"layout": _graph_layout(source, onnx=False)},
        },
        "quantization": quantization,
    }


def _verify_file(
    source: ExportSource,
    mode: str,
    art: Path,
    manifest: dict[str, Any],
    got: _Collected,
    opts: ExportOptions,
    fp32_row: FileRow | None,
    onnx_parity: dict[str, Any] | None,
    shown: Path,
) -> tuple[FileRow, dict[str, Any]]:
    """Run the file through the runtime, the code that will serve it on the device: parity and the
    closed-loop return with exploration off, then the folded noise on its own. Completes the manifest's
    model section with the interpreter's view of the tensors; returns the report row and the manifest's
    verification section."""
    tol, env_id = opts.tolerances, source.env_id
    backend = open_backend(art / "policy.tflite", observation_keys=_keys(source.observation))
    served = Policy(Manifest(art, manifest), backend, explore=False)
    manifest["model"]["input"].update(
        name=backend.input_name,
        shape=list(backend.input_shape),
        dtype=str(backend.input_dtype),
        quantization=_q(backend.input_quant),
    )
    if source.observation.is_dict:  # one graph input per key, the concatenation's slice of each
        manifest["model"]["input"]["keys"] = [
            {"name": k.name, "shape": [1, k.size]} for k in source.observation.keys
        ]
    manifest["model"]["output"] = {
        "name": backend.output_name,
        "dtype": str(backend.output_dtype),
        "quantization": _q(backend.output_quant),
    }
    starts = got.data.heldout_starts
    if starts is None:
        actions = np.stack([np.asarray(served.predict(o)) for o in got.data.heldout])
    else:  # whole episodes in order: the runtime's own state, reset where each one starts
        rows = []
        for o, start in zip(got.data.heldout, starts, strict=True):
            if start:
                served.reset()
            rows.append(np.asarray(served.predict(o)))
        actions = np.stack(rows)
    actions = actions.reshape(got.source_actions.shape)
    parity = compare_actions(got.source_actions, actions, source.categorical, got.margins, tol)
    if mode == "fp32":
        require_fp32_parity(f"policy.tflite ({mode})", parity, tol)
    closed = None  # no env: no closed loop (recorded observations only)
    if env_id is not None:
        closed = _ret(evaluate(served.predict, env_id, opts.eval_episodes, opts.seed, on_reset=served.reset))
    noise_check = None
    if source.noise is not None:  # the same loaded file, now exploring (verify_distribution turns it on)
        noise_check = verify_distribution(served, source, got.data.heldout, mode, opts.noise_seed)
        if env_id is not None:
            noise_check["closed_loop_with_noise"] = _ret(
                evaluate(served.predict, env_id, opts.eval_episodes, opts.seed)
            )
        if not noise_check["passed"]:
            if mode == "fp32":
                raise ExportError(
                    f"policy.tflite (fp32): the folded noise does not sample as configured: {noise_check}"
                )
            _logger.warning("%s: the folded noise's sample statistics are off: %s", mode, noise_check)
    latency = latency_us(served.predict, got.data.heldout)
    row = FileRow(mode, shown, (art / "policy.tflite").stat().st_size, parity, closed, latency)
    fp32_closed = (fp32_row or row).closed_loop
    closed_loop: dict[str, Any] = {"checked": False, "why": NO_CLOSED_LOOP}
    if closed is not None and fp32_closed is not None:
        kept = check_return(fp32_closed, closed, RETURN_DROP_WARNING_PCT)
        if mode != "fp32" and not kept.within:
            _logger.warning(
                "%s; --quantize auto keeps the fastest mode within --max-return-drop", kept.describe(mode)
            )
        _logger.info(
            "%s: %s vs the source, return %.1f (fp32 %.1f), predict p50 %.1f us",
            mode,
            parity_summary(parity),
            closed["mean_return"],
            fp32_closed["mean_return"],
            latency["p50_us"],
        )
        closed_loop = {
            "env_id": env_id,
            "episodes": opts.eval_episodes,
            "seeds_from": opts.seed,
            "this_file": closed,
            "fp32": fp32_closed,
            "source": got.source_return,
        }
    else:
        _logger.info(
            "%s: %s vs the source, predict p50 %.1f us (%s)",
            mode,
            parity_summary(parity),
            latency["p50_us"],
            NO_CLOSED_LOOP,
        )
    verification: dict[str, Any] = {
        "tolerances": tol.to_json(),
        "reference": source.reference_name,
        "heldout": got.data.description["heldout"],
        "onnx_vs_source": onnx_parity,
        "tflite_vs_source": parity,
        "closed_loop": closed_loop,
        "predict_latency_us": latency,
    }
    if noise_check is not None:
        verification["noise"] = noise_check
    return row, verification


def _choose(
    report: ExportReport,
    manifests: dict[str, dict[str, Any]],
    opts: ExportOptions,
    work: Path,
    staging: Path,
    heldout: np.ndarray,
) -> None:
    """--quantize auto: the fastest file whose closed-loop return is within the allowed drop of fp32's."""
    rows = {r.mode: r for r in report.rows}
    returns = {m: r.closed_loop for m, r in rows.items() if r.closed_loop is not None}
    if len(returns) != len(rows):  # export_source refuses auto without an env first
        raise ExportError("--quantize auto needs every file's closed-loop return")
    checks = {m: check_return(returns["fp32"], returns[m], opts.max_return_drop_pct) for m in rows}
    floor = checks["fp32"].floor
    # The per-file latencies were measured one file after another; the choice rests on a fresh,
    # interleaved measurement of all candidates, so that machine drift cannot pick the winner.
    policies = {m: Policy.load(work / m) for m in rows}
    latency = latency_interleaved_us({m: p.predict for m, p in policies.items()}, heldout)
    candidates = [
        {
            "mode": m,
            "predict_p50_us": latency[m]["p50_us"],
            "predict_p99_us": latency[m]["p99_us"],
            "mean_return": returns[m]["mean_return"],
            "size_bytes": r.size_bytes,
            "within_drop": checks[m].within,
        }
        for m, r in rows.items()
    ]
    eligible = [c for c in candidates if c["within_drop"]]
    if not eligible:  # cannot happen while fp32 is a candidate; kept as a guard against edits
        raise ExportError("no quantization mode kept the closed-loop return within the allowed drop")
    fastest = min(c["predict_p50_us"] for c in eligible)
    tied = [c for c in eligible if c["predict_p50_us"] <= fastest * (1 + AUTO_LATENCY_TIE_PCT / 100)]
    chosen = min(tied, key=lambda c: (c["size_bytes"], c["predict_p50_us"]))["mode"]
    for f in (work / chosen).iterdir():
        shutil.copyfile(f, staging / f.name)
    manifest = manifests[chosen]
    manifest["quantization"]["auto"] = {
        "rule": f"fastest predict p50 among the files kept: {RETURN_RULE} (pct: max_return_drop_pct); "
        f"p50s within {AUTO_LATENCY_TIE_PCT:g} % of the fastest are a tie, which the smaller file wins",
        "latency_tie_pct": AUTO_LATENCY_TIE_PCT,
        "max_return_drop_pct": opts.max_return_drop_pct,
        "return_scale": checks["fp32"].scale,
        "return_floor": floor,
        "chosen": chosen,
        "candidates": candidates,
    }
    write_manifest(staging, manifest)
    report.chosen = chosen
    report.auto = manifest["quantization"]["auto"]
    for r in report.rows:
        if r.mode == chosen:
            r.path = report.out / "policy.tflite"
    _logger.info("auto: chose %s among %s (return floor %.1f)", chosen, [c["mode"] for c in eligible], floor)


def _run_deterministic(backend: Any, x: np.ndarray, source: ExportSource) -> np.ndarray:
    """One invoke with the noise inputs at zero (the deterministic action), or a plain one."""
    if source.noise is None:
        return backend.run(x)
    zeros = np.zeros((1, source.act_dim), np.float32)
    feeds = {NOISE_INPUT: zeros}
    if source.noise.kind == "ou":
        feeds.update({EPISODE_START: np.zeros((1, 1), np.float32), STATE_INPUT: zeros})
    return backend.run_with(x, feeds)[0]


def _run_sequence(backend: Any, obs: np.ndarray, starts: np.ndarray, source: ExportSource) -> np.ndarray:
    """A stateful graph's file over whole episodes: each call fed the state the last one returned."""
    state = {t.name: t.initial_value() for t in source.states}
    out = []
    for o, start in zip(obs, starts, strict=True):
        feeds = {**state, EPISODE_START: np.full((1, 1), float(start), np.float32)}
        y, extras = backend.run_with(o[None], feeds)
        state = {t.name: np.asarray(extras[t.output], np.float32).reshape(t.shape) for t in source.states}
        out.append(np.asarray(y)[0])
    return np.stack(out)


def _state_calibration(source: ExportSource, data: Any) -> dict[str, np.ndarray] | None:
    """int8 calibration of the state inputs: the values the source's own graph fed them over the
    calibration episodes, and the episode starts there."""
    if not source.states:
        return None
    traj = source.trajectory(data.calibration, data.calibration_starts)
    return {EPISODE_START: data.calibration_starts.astype(np.float32)[:, None], **traj.fed}


def _noise_calibration(source: ExportSource, data: Any) -> dict[str, np.ndarray] | None:
    """int8 calibration of the noise inputs: standard-normal draws, and OU states from its process."""
    if source.noise is None:
        return None
    rng = np.random.default_rng(12345)
    n = len(data.calibration)
    extra = {NOISE_INPUT: rng.standard_normal((n, source.act_dim)).astype(np.float32)}
    if source.noise.kind == "ou":  # a process from zero, as the runtime starts it (episode_start 1 first)
        extra[EPISODE_START] = np.zeros((n, 1), np.float32)
        extra[EPISODE_START][0] = 1.0
        x = np.zeros((n, source.act_dim), np.float32)
        for i in range(1, n):
            x[i] = ou_step(
                x[i - 1], extra[NOISE_INPUT][i], source.noise.theta, source.noise.sigma, source.noise.dt
            )
        extra[STATE_INPUT] = x
    return extra


def _graph_layout(source: ExportSource, onnx: bool) -> str | None:
    """Image models: NCHW in torch and its ONNX file, NHWC after onnx2tf. Flat observations, and images a
    graph takes flat (rl2edge's own, `flat_frames`): None."""
    layout = source.observation.layout
    if layout == "flat" or source.flat_frames:
        return None
    return "NCHW" if onnx and layout == "HWC" else "N" + ("HWC" if layout == "HWC" else layout)


def _keys(observation: ObservationSpec) -> tuple[str, ...]:
    """A Dict observation's keys: the graph's observation inputs, in order."""
    return tuple(k.name for k in observation.keys)


def _q(q: tuple[float, int] | None) -> dict[str, float] | None:
    return None if q is None else {"scale": q[0], "zero_point": q[1]}
