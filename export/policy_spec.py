"""A policy spec: what a model file trained elsewhere cannot say about itself (docs/export.md, "Policies
trained elsewhere"). An ONNX file or a SavedModel names and shapes its tensors; it does not say what the
observation means (its bounds and units, a Dict's keys), whether it normalizes its input, what its output
means (a mean in [-1, 1] to scale to the action bounds, or values already in units), or which of its
outputs feed which inputs on the next call. The spec says that, in YAML, and the file is checked against
it where both speak (`check_against`: a contradiction is one line naming the tensor).

    spec: 1                      # the format's version
    env: Pendulum-v1             # optional: the closed-loop checks and `evaluate` run in it
    observation:                 # a Box: shape, bounds (optional), the graph input that takes it
      shape: [3]
      low: [-1.0, -1.0, -8.0]
      high: [1.0, 1.0, 8.0]
      input: obs
    #   or a Dict, its keys in order, each `input` a graph input of its own (or `input` once, above, for
    #   one input taking the keys concatenated):
    #   keys: [{name: lidar, shape: [24], low: 0.0, high: 10.0, unit: m, input: lidar}, ...]
    normalization: in-graph      # none | in-graph | {file: stats.npz, layout: rsl-rl} |
                                 # {mean: [...], var: [...], layout: gymnasium, epsilon: 1e-8, clip: 10}
    action:
      type: box                  # box | discrete
      low: [-2.0]
      high: [2.0]
      output: actions            # the graph output
      scale: units               # units: values in action units | unit-range: a mean in [-1, 1]
      squash: clip               # clip | tanh | none (unit-range only; units are always held to the bounds)
    #   discrete: {type: discrete, n: 3, start: 0, output: logits}   (logits or Q-values: argmax)
    state:                       # a recurrent policy: which output feeds which input (reset: zeros)
      - {input: h_in, output: h_out}
      - {input: c_in, output: c_out}

Normalization layouts, each its library's formula with its defaults:

| layout | formula | epsilon | clip |
| --- | --- | --- | --- |
| rsl-rl (EmpiricalNormalization) | (x - mean) / (sqrt(var) + eps) | 0.01 | none |
| gymnasium (NormalizeObservation) | (x - mean) / sqrt(var + eps) | 1e-8 | none |
| vecnormalize (SB3's VecNormalize) | clip((x - mean) / sqrt(var + eps), -clip, clip) | 1e-8 | 10 |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, short_repr
from rl2edge.fileio import load_yaml, sha256_file
from rl2edge.specs import ActionSpec, ObservationKey, ObservationSpec, check_key_name
from rl2edge.train.core.normalization import RunningNormalizer

SPEC_VERSION = 1
LAYOUTS = {  # layout -> (epsilon added to the std (True) or to the var (False), default epsilon, default clip)
    "rsl-rl": (True, 1e-2, None),
    "gymnasium": (False, 1e-8, None),
    "vecnormalize": (False, 1e-8, 10.0),
}
NO_CLIP = float(np.finfo(np.float32).max)
"""The clip of a layout without one: the float32 maximum, which no finite observation reaches."""
ACTIVATIONS = ("elu", "relu", "tanh", "selu", "leaky_relu")
SCALES = ("units", "unit-range")
SQUASHES = ("clip", "tanh", "none")


@dataclass(frozen=True)
class StateIO:
    """One state tensor of the file: the input it is fed from and the output that feeds it next call."""

    input: str
    output: str


@dataclass(frozen=True)
class ActionOutput:
    """What the file's action output is, and the action head that turns it into the PLC's action."""

    action: ActionSpec
    output: str | None
    """The graph output; None: the file's only output."""
    scale: str = "units"
    squash: str = "clip"

    @property
    def head(self) -> str:
        """The head (export.graph_spec.HEADS): units are held to the bounds; a unit-range mean is squashed
        as the spec says, then scaled to them."""
        if self.action.discrete:
            return "argmax"
        if self.scale == "units":
            return "clip"
        return {"clip": "clip_unscale", "tanh": "tanh_unscale", "none": "unscale"}[self.squash]


@dataclass(frozen=True)
class PolicySpec:
    path: Path
    sha256: str
    observation: ObservationSpec
    inputs: tuple[str, ...]
    """The graph inputs the observation goes to: one (the concatenation), or one per Dict key, in order."""
    normalization: RunningNormalizer
    """Disabled when the file normalizes itself (in-graph) or takes raw observations (none)."""
    normalization_kind: str
    action: ActionOutput
    state: tuple[StateIO, ...] = ()
    env_id: str | None = None
    activation: str = "elu"
    """A checkpoint's hidden layers' activation (a file of weights does not say it: rsl-rl's default)."""

    @property
    def per_key_inputs(self) -> bool:
        return self.observation.is_dict and len(self.inputs) == len(self.observation.keys)

    def to_json(self) -> dict[str, Any]:
        """What the manifest's `source.spec` records of it."""
        return {
            "file": str(self.path),
            "sha256": self.sha256,
            "inputs": list(self.inputs),
            "normalization": self.normalization_kind,
            "action_output": self.action.output,
            "action_scale": self.action.scale,
            "head": self.action.head,
            "state": [{"input": s.input, "output": s.output} for s in self.state],
            "env_id": self.env_id,
        }

    def source_fields(
        self, env_id: str | None, description: dict[str, Any], reference_name: str
    ) -> dict[str, Any]:
        """The fields of an export source (export.source.GraphSource) that every source described by a spec
        fills alike: the specs, the normalization and head, what it is called."""
        return {
            "env_id": env_id,
            "observation": self.observation,
            "action": self.action.action,
            "norm": self.normalization,
            "head": self.action.head,
            "description": description,
            "reference_name": reference_name,
            "algo": reference_name,
            "normalized_inside": self.normalization_kind == "in-graph",
        }

    def describe(self, kind: str, path: Path, sha256: str, env_id: str | None, **more: Any) -> dict[str, Any]:
        """The manifest's `source` section of a file described by this spec."""
        return {
            "kind": kind,
            "file": str(path),
            "sha256": sha256,
            **more,
            "spec": self.to_json(),
            "env_id": env_id,
        }

    def check_against(self, inputs: dict[str, tuple[int, ...]], outputs: dict[str, tuple[int, ...]]) -> None:
        """The file's own names and shapes (batch 1; -1 for a dynamic dimension) against the spec: every
        contradiction is a ConfigError naming the tensor."""
        where = f"{self.path}"
        dynamic = [f"{n} {list(s)}" for n, s in {**inputs, **outputs}.items() if any(d < 0 for d in s[1:])]
        if dynamic:
            raise ConfigError(
                f"{where}: tensor {dynamic[0]} has a dynamic dimension other than the batch; export the model "
                "with fixed shapes (the batch may stay dynamic)"
            )
        state_inputs = {s.input for s in self.state}
        expected = [*self.inputs, *state_inputs]
        unknown = [n for n in expected if n not in inputs]
        if unknown:
            raise ConfigError(
                f"{where}: the spec names input {unknown[0]!r}, which the model does not have ({sorted(inputs)})"
            )
        unexplained = sorted(set(inputs) - set(expected))
        if unexplained:
            raise ConfigError(
                f"{where}: the model's input {unexplained[0]!r} is not in the spec: name it as the observation's "
                "input (observation.input or a key's input) or as a state input"
            )
        sizes = [k.size for k in self.observation.keys] if self.per_key_inputs else [self.observation.size]
        for name, size in zip(self.inputs, sizes, strict=True):
            got = int(np.prod(inputs[name][1:]))
            if got != size:
                raise ConfigError(
                    f"{where}: input {name!r} takes {got} values {list(inputs[name])}; the spec's observation gives "
                    f"it {size}"
                )
        action_output = self.action.output or (next(iter(outputs)) if len(outputs) == 1 else None)
        if action_output is None:
            raise ConfigError(
                f"{where}: the model has outputs {sorted(outputs)}: say which is the action (action.output)"
            )
        if action_output not in outputs:
            raise ConfigError(
                f"{where}: the spec's action output {action_output!r} is not one of the model's {sorted(outputs)}"
            )
        width = int(np.prod(outputs[action_output][1:]))
        if width != self.action.action.output_width:
            raise ConfigError(
                f"{where}: output {action_output!r} has {width} values {list(outputs[action_output])}; the spec's "
                f"action needs {self.action.action.output_width}"
            )
        for s in self.state:
            if s.output not in outputs:
                raise ConfigError(
                    f"{where}: the state output {s.output!r} is not one of the model's outputs {sorted(outputs)}"
                )
            if list(outputs[s.output][1:]) != list(inputs[s.input][1:]) or np.prod(
                outputs[s.output]
            ) != np.prod(inputs[s.input]):
                raise ConfigError(
                    f"{where}: state output {s.output!r} {list(outputs[s.output])} does not match its input "
                    f"{s.input!r} {list(inputs[s.input])}: a recurrent file's state outputs must feed its inputs"
                )


def load_policy_spec(path: Path) -> PolicySpec:
    """The spec file at `path`; relative files it names (a statistics .npz) are read from its folder."""
    path = Path(path)
    return policy_spec_from_dict(load_yaml(path, "policy spec"), path, sha256_file(path))


def policy_spec_from_dict(doc: Any, where: Path, sha256: str = "", base: Path | None = None) -> PolicySpec:
    """A spec given as the mapping the YAML file holds (the Python API takes one); `where` names it in
    messages, `base` is where the files it names are read from (its own folder by default)."""
    path = Path(where)
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: a policy spec is a YAML mapping (docs/export.md, 'Policies trained elsewhere')"
        )
    if doc.get("spec") != SPEC_VERSION:
        raise ConfigError(
            f"{path}: `spec: {SPEC_VERSION}` is missing or another version ({doc.get('spec')!r})"
        )
    known = {"spec", "env", "observation", "normalization", "action", "state", "activation"}
    extra = sorted(set(doc) - known)
    if extra:
        raise ConfigError(f"{path}: unknown field {extra[0]!r}; a policy spec has {', '.join(sorted(known))}")
    observation, inputs = _observation(path, doc.get("observation"))
    normalization, kind = _normalization(
        path, doc.get("normalization", "none"), observation, base or path.parent
    )
    env = doc.get("env")
    if env is not None and not isinstance(env, str):
        raise ConfigError(f"{path}: env must be a Gymnasium env id, got {env!r}")
    activation = doc.get("activation", "elu")
    if activation not in ACTIVATIONS:
        raise ConfigError(f"{path}: activation {activation!r}: choose one of {', '.join(ACTIVATIONS)}")
    return PolicySpec(
        path,
        sha256,
        observation,
        inputs,
        normalization,
        kind,
        _action(path, doc.get("action")),
        _state(path, doc.get("state") or []),
        env,
        activation,
    )


def _positive(path: Path, what: str, value: Any, zero_ok: bool = False) -> float:
    """A finite number above 0 (or at least 0), from a spec a person wrote."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        need = "a finite number >= 0" if zero_ok else "a finite number above 0"
        raise ConfigError(f"{path}: {what} must be {need}, got {short_repr(value)}")
    return float(value)


def _floats(path: Path, what: str, value: Any, size: int) -> tuple[float, ...]:
    """A bound: one number for every element, or a list of `size` finite numbers."""
    values = [value] * size if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not isinstance(values, list) or len(values) != size:
        raise ConfigError(f"{path}: {what} must be a number or a list of {size} numbers, got {value!r}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{path}: {what} must hold finite numbers, got {v!r}")
        out.append(float(v))
    return tuple(out)


MAX_SPEC_VALUES = 1 << 20
"""The most values a declared shape may hold (a 576 x 576 x 3 image): bounded before anything is allocated
(a declared [60000000] had taken 30 s and 1.9 GB before its refusal)."""


def _shape(path: Path, what: str, value: Any) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or len(value) > 8
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)
    ):
        raise ConfigError(
            f"{path}: {what} must be a list of at most 8 positive sizes, got {short_repr(value)}"
        )
    if math.prod(value) > MAX_SPEC_VALUES:
        raise ConfigError(
            f"{path}: {what} {short_repr(value)} holds {math.prod(value)} values; a policy observes at most "
            f"{MAX_SPEC_VALUES} (check the shape: a batch or a sequence axis does not belong in it)"
        )
    return tuple(value)


def _observation(path: Path, doc: Any) -> tuple[ObservationSpec, tuple[str, ...]]:
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: `observation` is missing: give its shape (a Box) or its keys (a Dict)")
    if "keys" in doc:
        keys: list[ObservationKey] = []
        inputs: list[str] = []
        for i, k in enumerate(doc["keys"] or []):
            if not isinstance(k, dict) or "name" not in k:
                raise ConfigError(f"{path}: observation.keys[{i}] must be a mapping with a name and a shape")
            shape = _shape(path, f"observation.keys[{i}].shape", k.get("shape"))
            size = int(np.prod(shape))
            if sum(key.size for key in keys) + size > MAX_SPEC_VALUES:
                raise ConfigError(f"{path}: observation.keys hold more than {MAX_SPEC_VALUES} values in all")
            check_key_name(str(k["name"]))
            low = _floats(path, f"{k['name']}.low", k["low"], size) if "low" in k else ()
            high = _floats(path, f"{k['name']}.high", k["high"], size) if "high" in k else ()
            keys.append(ObservationKey(str(k["name"]), shape, "float32", low, high, k.get("unit")))
            if "input" in k:
                inputs.append(str(k["input"]))
        spec = ObservationSpec.of_keys(keys)
        if inputs and len(inputs) != len(keys):
            raise ConfigError(
                f"{path}: give every observation key an `input`, or none (and observation.input once)"
            )
        if not inputs:
            inputs = [str(doc.get("input", "obs"))]
        return spec, tuple(inputs)
    shape = _shape(path, "observation.shape", doc.get("shape"))
    size = int(np.prod(shape))
    low = _floats(path, "observation.low", doc["low"], size) if "low" in doc else ()
    high = _floats(path, "observation.high", doc["high"], size) if "high" in doc else ()
    return ObservationSpec((size,), "float32", low, high), (str(doc.get("input", "obs")),)


def _normalization(
    path: Path, doc: Any, observation: ObservationSpec, base: Path
) -> tuple[RunningNormalizer, str]:
    shape = observation.shape
    if doc in ("none", "in-graph"):
        return RunningNormalizer(shape, enabled=False), str(doc)
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: normalization must be none, in-graph, or a mapping of statistics, got {doc!r}"
        )
    layout = doc.get("layout", "gymnasium")
    if layout not in LAYOUTS:
        raise ConfigError(f"{path}: normalization.layout {layout!r}: choose one of {', '.join(LAYOUTS)}")
    if "file" in doc:
        mean, var = _statistics_file(base / str(doc["file"]), layout, observation.size)
        where = str(doc["file"])
    else:
        mean = np.asarray(_floats(path, "normalization.mean", doc.get("mean"), observation.size))
        var = np.asarray(_floats(path, "normalization.var", doc.get("var"), observation.size))
        where = "the spec"
    if (var <= 0).any() or not np.isfinite(var).all() or not np.isfinite(mean).all():
        bad = int(np.flatnonzero((var <= 0) | ~np.isfinite(var) | ~np.isfinite(mean))[0])
        raise ConfigError(
            f"{path}: normalization statistics from {where}: element {bad} has variance {var[bad]!r} and mean "
            f"{mean[bad]!r}; every variance must be a finite number above 0"
        )
    on_std, default_eps, default_clip = LAYOUTS[layout]
    eps = _positive(path, "normalization.epsilon", doc.get("epsilon", default_eps), zero_ok=True)
    clip = doc.get("clip", default_clip)
    if clip is not None:  # clip <= 0 would hold every observation at one value: a policy blind to the plant
        clip = _positive(path, "normalization.clip", clip)
    norm = RunningNormalizer(shape, clip=NO_CLIP if clip is None else clip, eps=0.0 if on_std else eps)
    norm.mean = mean.reshape(shape).astype(np.float64)
    # rsl-rl divides by std + eps: the variance whose square root that is, so that RunningNormalizer's one
    # formula (x - mean) / sqrt(var + eps') gives the library's own numbers
    norm.var = ((np.sqrt(var) + eps) ** 2 if on_std else var).reshape(shape).astype(np.float64)
    return norm, f"{layout} statistics from {where}"


def _statistics_file(path: Path, layout: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """mean and var from an .npz: `mean` and `var` (or `std`), or rsl-rl's buffer names `_mean`, `_var`."""
    try:
        data = np.load(path)
    except FileNotFoundError:
        raise ConfigError(f"normalization file {path} does not exist") from None
    except Exception as exc:  # numpy raises several types for a file that is no .npz
        raise ConfigError(f"normalization file {path} is not an .npz of arrays: {exc}") from None
    names = set(data.files)
    mean_name = next((n for n in ("mean", "_mean", "obs_rms.mean") if n in names), None)
    if mean_name is None:
        raise ConfigError(f"normalization file {path} has no `mean` array (it has {sorted(names)})")
    mean = np.asarray(data[mean_name], np.float64).reshape(-1)
    if "var" in names or "_var" in names:
        var = np.asarray(data["var" if "var" in names else "_var"], np.float64).reshape(-1)
    elif "std" in names or "_std" in names:
        var = np.asarray(data["std" if "std" in names else "_std"], np.float64).reshape(-1) ** 2
    else:
        raise ConfigError(f"normalization file {path} has no `var` or `std` array (it has {sorted(names)})")
    for name, arr in (("mean", mean), ("var", var)):
        if arr.size != size:
            raise ConfigError(
                f"normalization file {path}: {name} has {arr.size} values; the spec's observation has {size}"
            )
    return mean, var


def _action(path: Path, doc: Any) -> ActionOutput:
    if not isinstance(doc, dict) or doc.get("type") not in ("box", "discrete"):
        raise ConfigError(f"{path}: `action` must be a mapping with type box or discrete")
    output = str(doc["output"]) if "output" in doc else None
    if doc["type"] == "discrete":
        n = doc.get("n")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(
                f"{path}: a discrete action needs n, its number of actions (2 or more), got {n!r}"
            )
        return ActionOutput(ActionSpec("discrete", n=n, start=int(doc.get("start", 0))), output)
    if "low" not in doc or "high" not in doc:
        raise ConfigError(f"{path}: a box action needs its bounds, low and high (in the PLC's units)")
    size = len(doc["low"]) if isinstance(doc["low"], list) else int(doc.get("size", 1))
    low, high = _floats(path, "action.low", doc["low"], size), _floats(path, "action.high", doc["high"], size)
    if any(lo >= hi for lo, hi in zip(low, high, strict=True)):
        raise ConfigError(f"{path}: every action.low must be below its action.high")
    scale, squash = doc.get("scale", "units"), doc.get("squash", "clip")
    if scale not in SCALES:
        raise ConfigError(f"{path}: action.scale {scale!r}: choose {' or '.join(SCALES)}")
    if squash not in SQUASHES:
        raise ConfigError(f"{path}: action.squash {squash!r}: choose one of {', '.join(SQUASHES)}")
    return ActionOutput(ActionSpec("box", shape=(size,), low=low, high=high), output, scale, squash)


def _state(path: Path, doc: Any) -> tuple[StateIO, ...]:
    if not isinstance(doc, list):
        raise ConfigError(f"{path}: `state` must be a list of {{input, output}} pairs")
    out = []
    for i, s in enumerate(doc):
        if not isinstance(s, dict) or set(s) != {"input", "output"}:
            raise ConfigError(f"{path}: state[{i}] must be a mapping of input and output, got {s!r}")
        out.append(StateIO(str(s["input"]), str(s["output"])))
    return tuple(out)
