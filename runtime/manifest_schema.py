"""The manifest's fields that the runtime acts on, checked before anything uses them: an artifact is a
closed box (every file a bare name inside its folder) and every malformed field is one line naming it.

The manifest comes from a file someone copied onto the device; nothing in it is trusted. Fields that the
runtime only reports (tools, verification figures) are not checked.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from rl2edge.errors import ManifestError, short_repr
from rl2edge.specs import KEY_NAME, RESERVED_KEYS

MAX_MANIFEST_BYTES = 4 << 20
"""A real manifest is a few KB (tens with an image policy's statistics): a larger one is refused unread."""
MAX_OBS_VALUES = 1 << 24
MAX_ACTIONS = 1 << 20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LAYOUTS = ("flat", "HWC", "CHW", "NHWC", "NCHW")


def _fail(field: str, what: str, value: Any) -> ManifestError:
    return ManifestError(f"manifest field {field}: {what}, got {short_repr(value)}")


def _dict(data: Any, field: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _fail(field, "must be an object", data)
    return data


def _int(value: Any, field: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(field, f"must be an integer from {lo} to {hi}", value)
    return value


def _bound(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(field, "must be a finite number or null", value)
    return float(value)


def bare_name(name: Any, field: str, artifact_dir: Path) -> str:
    """A file name inside the artifact folder: no separators, no `..`, no absolute path, no symlink out."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or len(name) > 255
    ):
        raise _fail(field, "must be a bare file name inside the artifact folder", name)
    path = artifact_dir / name
    if path.is_symlink() and path.resolve().parent != artifact_dir.resolve():
        raise _fail(field, f"is a symlink leaving the artifact folder (to {path.resolve()})", name)
    return name


def check_manifest(data: dict[str, Any], artifact_dir: Path) -> None:
    """ManifestError naming the first malformed field the runtime relies on."""
    files = _dict(data["files"], "files")
    for name, digest in files.items():
        bare_name(name, f"files[{short_repr(name)}]", artifact_dir)
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise _fail(f"files[{short_repr(name)}]", "must be a sha256 hex digest", digest)
    model = _dict(data["model"], "model")
    bare_name(model.get("file"), "model.file", artifact_dir)
    model_input = model.get("input")
    if model_input is not None:
        _dict(model_input, "model.input")
        if model_input.get("layout") not in (None, *_LAYOUTS):
            raise _fail(
                "model.input.layout",
                f"must be one of {', '.join(_LAYOUTS)} or null",
                model_input.get("layout"),
            )
    onnx = data.get("onnx")
    if onnx is not None:
        _dict(onnx, "onnx")
        if onnx.get("input_layout") not in (None, *_LAYOUTS):
            raise _fail(
                "onnx.input_layout", f"must be one of {', '.join(_LAYOUTS)} or null", onnx.get("input_layout")
            )
    _dict(data["quantization"], "quantization")
    if not isinstance(data["quantization"].get("mode"), str):
        raise _fail("quantization.mode", "must be a string", data["quantization"].get("mode"))
    _check_observation(_dict(data["observation"], "observation"))
    _check_action(_dict(data["action"], "action"))
    folded = _dict(data["folded"], "folded")
    if folded.get("noise") is not None:
        _check_noise(_dict(folded["noise"], "folded.noise"))
    state_names: set[str] = set()
    if data.get("state") is not None:
        _check_state(_dict(data["state"], "state"))
        state_names = {t["input"] for t in data["state"]["tensors"]}
    named: list[tuple[str, Any]] = [
        ("folded.noise.graph.state", ((folded.get("noise") or {}).get("graph") or {}).get("state")),
        ("folded.action_rate.state", (folded.get("action_rate") or {}).get("state")),
    ]
    for where, tensor in named:
        if tensor is not None and tensor not in state_names:
            raise _fail(where, "must name a tensor of the manifest's state section", tensor)
    if folded.get("action_rate") is not None:
        _check_action_rate(_dict(folded["action_rate"], "folded.action_rate"))


def _check_observation(obs: dict[str, Any]) -> None:
    shape = obs.get("shape")
    if not isinstance(shape, list) or not 1 <= len(shape) <= 4:
        raise _fail("observation.shape", "must be a list of 1 to 4 sizes", shape)
    size = 1
    for i, d in enumerate(shape):
        size *= _int(d, f"observation.shape[{i}]", 1, MAX_OBS_VALUES)
    if size > MAX_OBS_VALUES:
        raise _fail("observation.shape", f"holds more than {MAX_OBS_VALUES} values", shape)
    if obs.get("layout", "flat") not in _LAYOUTS:
        raise _fail("observation.layout", f"must be one of {', '.join(_LAYOUTS)}", obs.get("layout"))
    checked: dict[str, list[float | None]] = {}
    for key in ("low", "high"):
        bounds = obs.get(key)
        if bounds is None:
            continue
        if not isinstance(bounds, list) or len(bounds) not in (0, size):
            raise _fail(f"observation.{key}", f"must be a list of {size} numbers or nulls", bounds)
        checked[key] = [_bound(v, f"observation.{key}[{i}]") for i, v in enumerate(bounds)]
    low, high = checked.get("low") or [], checked.get("high") or []
    for i, (lo, hi) in enumerate(zip(low, high, strict=False)):  # either may be [] (unbounded)
        if lo is not None and hi is not None and lo > hi:
            raise ManifestError(
                f"manifest field observation.low[{i}]/high[{i}]: low must not exceed high, got {lo!r} > {hi!r}"
            )
    if obs.get("keys") is not None:
        _check_keys(obs["keys"], size)


def _check_keys(keys: Any, size: int) -> None:
    """A Dict observation: named keys whose sizes add up to the observation's (their concatenation)."""
    if not isinstance(keys, list) or not keys:
        raise _fail("observation.keys", "must be a non-empty list of keys", keys)
    names, total = [], 0
    for i, k in enumerate(keys):
        k = _dict(k, f"observation.keys[{i}]")
        name = k.get("name")
        if (
            not isinstance(name, str)
            or not KEY_NAME.fullmatch(name)
            or name in RESERVED_KEYS
            or name in names
        ):
            raise _fail(f"observation.keys[{i}].name", "must be a distinct identifier", name)
        names.append(name)
        shape = k.get("shape")
        if not isinstance(shape, list) or not 1 <= len(shape) <= 3:
            raise _fail(f"observation.keys[{i}].shape", "must be a list of 1 to 3 sizes", shape)
        n = 1
        for j, d in enumerate(shape):
            n *= _int(d, f"observation.keys[{i}].shape[{j}]", 1, MAX_OBS_VALUES)
        total += n
        for side in ("low", "high"):
            bounds = k.get(side)
            if bounds is None:
                continue
            if not isinstance(bounds, list) or len(bounds) not in (0, n):
                raise _fail(
                    f"observation.keys[{i}].{side}", f"must be a list of {n} numbers or nulls", bounds
                )
            for j, v in enumerate(bounds):
                _bound(v, f"observation.keys[{i}].{side}[{j}]")
        if not isinstance(k.get("dtype", "float32"), str) or not isinstance(k.get("unit") or "", str):
            raise _fail(
                f"observation.keys[{i}]",
                "dtype and unit must be strings",
                {"dtype": k.get("dtype"), "unit": k.get("unit")},
            )
    if total != size:
        raise _fail("observation.keys", f"sizes add up to {total}, not the observation's {size}", names)


def _check_action(act: dict[str, Any]) -> None:
    kind = act.get("type")
    if kind == "discrete":
        _int(act.get("n"), "action.n", 1, MAX_ACTIONS)
        _int(act.get("start", 0), "action.start", -MAX_ACTIONS, MAX_ACTIONS)
        return
    if kind == "multi_discrete":
        nvec, start = act.get("nvec"), act.get("start")
        if not isinstance(nvec, list) or not 1 <= len(nvec) <= MAX_ACTIONS:
            raise _fail("action.nvec", "must be a non-empty list of choices per component", nvec)
        if not isinstance(start, list) or len(start) != len(nvec):
            raise _fail("action.start", "must list one first index per component of nvec", start)
        for i, (n, s) in enumerate(zip(nvec, start, strict=True)):
            _int(n, f"action.nvec[{i}]", 2, MAX_ACTIONS)
            _int(s, f"action.start[{i}]", -MAX_ACTIONS, MAX_ACTIONS)
        if not isinstance(act.get("binary", False), bool):
            raise _fail("action.binary", "must be true or false", act.get("binary"))
        return
    if kind != "box":
        raise _fail("action.type", "must be 'discrete', 'multi_discrete' or 'box'", kind)
    low: Any = act.get("low")
    high: Any = act.get("high")
    for key, bounds in (("low", low), ("high", high)):
        if not isinstance(bounds, list) or not 1 <= len(bounds) <= MAX_ACTIONS:
            raise _fail(f"action.{key}", "must be a non-empty list of finite numbers", bounds)
        for i, v in enumerate(bounds):
            if _bound(v, f"action.{key}[{i}]") is None:
                raise _fail(f"action.{key}[{i}]", "must be a finite number (a Box action is bounded)", v)
    if len(low) != len(high) or any(lo > hi for lo, hi in zip(low, high, strict=True)):
        raise _fail("action.low/high", "must have the same length with low <= high", [low, high])


def _check_noise(noise: dict[str, Any]) -> None:
    _int(noise.get("dim"), "folded.noise.dim", 1, MAX_ACTIONS)
    _int(noise.get("seed"), "folded.noise.seed", 0, (1 << 64) - 1)
    graph = _dict(noise.get("graph"), "folded.noise.graph")
    for key in ("inputs", "outputs"):
        names = graph.get(key)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _fail(f"folded.noise.graph.{key}", "must be a list of tensor names", names)
    if not isinstance(graph.get("noise_input"), str):
        raise _fail("folded.noise.graph.noise_input", "must be a tensor name", graph.get("noise_input"))
    state = [graph.get("state_input"), graph.get("state_output")]
    if state != [None, None] and not all(isinstance(n, str) for n in state):
        raise _fail(
            "folded.noise.graph.state_input/state_output", "must both be tensor names, or both absent", state
        )


def _check_action_rate(rate: dict[str, Any]) -> None:
    """An action-rate limit folded into the graph (export.rate_limit): what serve reports of it."""
    for key in ("max_rate", "max_step"):
        values = rate.get(key)
        field = f"folded.action_rate.{key}"
        if not isinstance(values, list) or not values or not all((_bound(v, field) or 0) > 0 for v in values):
            raise _fail(field, "must be a non-empty list of positive finite numbers", values)
    period = _bound(rate.get("period_ms"), "folded.action_rate.period_ms")
    if period is None or period <= 0:
        raise _fail("folded.action_rate.period_ms", "must be a positive number", rate.get("period_ms"))
    if rate.get("state") is None:
        raise _fail("folded.action_rate.state", "must name the previous action's state tensor", None)


def _check_state(state: dict[str, Any]) -> None:
    """Explicit state I/O (runtime.state): float32 tensors, each an input and an output of its own name,
    and the episode-start input."""
    start = _dict(state.get("episode_start"), "state.episode_start")
    if not isinstance(start.get("input"), str):
        raise _fail("state.episode_start.input", "must be a tensor name", start.get("input"))
    tensors = state.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        raise _fail("state.tensors", "must be a non-empty list of state tensors", tensors)
    seen: set[str] = {start["input"]}
    for i, t in enumerate(tensors):
        t = _dict(t, f"state.tensors[{i}]")
        for key in ("input", "output"):
            name = t.get(key)
            if not isinstance(name, str) or name in seen:
                raise _fail(f"state.tensors[{i}].{key}", "must be a distinct tensor name", name)
            seen.add(name)
        shape = t.get("shape")
        if not isinstance(shape, list) or not 1 <= len(shape) <= 3:
            raise _fail(f"state.tensors[{i}].shape", "must be a list of 1 to 3 sizes", shape)
        for j, d in enumerate(shape):
            _int(d, f"state.tensors[{i}].shape[{j}]", 1, MAX_OBS_VALUES)
        if t.get("dtype") != "float32":
            raise _fail(f"state.tensors[{i}].dtype", "must be float32", t.get("dtype"))
        initial = t.get("initial", 0.0)
        if isinstance(initial, bool) or not isinstance(initial, (int, float)) or not math.isfinite(initial):
            raise _fail(f"state.tensors[{i}].initial", "must be a finite number", initial)
