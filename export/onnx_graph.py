"""The ONNX route: a model file trained elsewhere (an ONNX file, as Isaac Lab's and rsl-rl's exporters write
them) made into the deployable graph by composing ONNX around it, then converted by onnx2tf as the torch
route's ONNX file is.

    the observation input (`obs`, or one input per Dict key, named after the key) [1, n]
    -> the spec's normalization, when the file does not normalize itself (Sub, Mul, Min/Max)
    -> the file's own graph, its inputs fed in the shapes it declares (a key's slice for per-key inputs),
       its LSTM and GRU nodes as one step of gates (export.onnx_cells)
    -> the head: argmax, or the bounds (units), or the squash and the scale to them (a unit-range mean)
    -> `action`; a recurrent file's state outputs, reshaped to [1, size], under their own names

A recurrent file's state inputs are the artifact's state tensors (rl2edge.specs.StateTensor, [1, size]),
multiplied by (1 - episode_start) inside the graph before they reach the file's inputs, as every state of
the contract is. The reference the exported files are checked against is the file itself in onnxruntime,
with the spec's normalization and head applied in numpy around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, ExportError
from rl2edge.export.graph_spec import EPISODE_START, OUTPUT_NAME
from rl2edge.export.policy_spec import PolicySpec
from rl2edge.export.rate_limit import RateLimit
from rl2edge.export.source import GraphSource
from rl2edge.specs import ActionTransform, NoiseSpec, StateTensor
from rl2edge.train.core.numpy_policy import argmax_heads

_logger = logging.getLogger(__name__)

PREFIX = "src_"
"""Every name of the file's graph inside the composed one, so that none clashes with the contract's."""
MIN_OPSET = 11


def numpy_head(
    head: str, out: np.ndarray, transform: ActionTransform, low: np.ndarray, high: np.ndarray
) -> np.ndarray:
    """The head in float32 numpy, the formulas of export.deployable.DeployablePolicy.head_of."""
    out = np.asarray(out, np.float32)
    if head == "argmax" and transform.nvec is not None:  # multi-discrete: one index per component
        return argmax_heads(out, transform.nvec) + transform.start
    if head == "argmax":
        return out.argmax(-1) + transform.start
    if head == "clip":
        return np.maximum(np.minimum(out, high), low)
    if head == "clip_unscale":
        out = np.clip(out, -1.0, 1.0)
    elif head == "tanh_unscale":
        out = np.tanh(out)
    return (transform.center + out.astype(np.float32) * transform.half_range).astype(np.float32)


def io_shapes(values: Any) -> dict[str, tuple[int, ...]]:
    """An ONNX graph's inputs or outputs by name, shapes with batch 1 and -1 for another dynamic dimension."""
    out = {}
    for v in values:
        dims = []
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            dims.append(d.dim_value if d.dim_value > 0 else (1 if i == 0 else -1))
        out[v.name] = tuple(dims)
    return out


@dataclass
class OnnxFileSource(GraphSource):
    """A source whose graph is an ONNX file with its policy spec."""

    model_path: Path = Path()
    spec: PolicySpec | None = None
    _model: Any = field(default=None, repr=False)
    _session: Any = field(default=None, repr=False)
    _inputs: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _outputs: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)
    _workdir: Any = field(default=None, repr=False)
    """A temporary folder the file lives in, where the source wrote it itself (a TorchScript file's ONNX)."""

    def __post_init__(self) -> None:
        import onnx
        import onnxruntime as ort

        assert self.spec is not None
        try:
            self._model = onnx.load(str(self.model_path))
            onnx.checker.check_model(self._model)
        except Exception as exc:  # onnx raises several types for a file that is no model
            raise ConfigError(f"{self.model_path} is not a valid ONNX model: {exc}") from None
        initializers = {i.name for i in self._model.graph.initializer}
        self._inputs = io_shapes(v for v in self._model.graph.input if v.name not in initializers)
        self._outputs = io_shapes(self._model.graph.output)
        self.spec.check_against(self._inputs, self._outputs)
        opset = next((o.version for o in self._model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset < MIN_OPSET:
            raise ConfigError(
                f"{self.model_path}: opset {opset}; export the model with opset {MIN_OPSET} or later"
            )
        self._session = ort.InferenceSession(str(self.model_path), providers=["CPUExecutionProvider"])
        self.states = [
            StateTensor(
                s.input,
                (1, int(np.prod(self._inputs[s.input]))),
                f"the file's state {s.input}",
                output=s.output,
            )
            for s in self.spec.state
        ]
        if self.states:
            self.state_cell = (
                f"the file's own graph ({self.model_path.name}) with its state inputs "
                f"{', '.join(s.input for s in self.spec.state)} multiplied by (1 - episode_start) first"
            )
            self.reset()

    # ---- what the route cannot fold yet: said before any work
    def fold_noise(self, spec: NoiseSpec) -> None:
        raise ExportError(
            "--noise: folding noise into a file trained elsewhere is not implemented; export without it"
        )

    def limit_rate(self, spec: RateLimit) -> None:
        raise ExportError(
            "--max-action-rate: a rate limit around a file trained elsewhere is not implemented; export without it"
        )

    # ---- the reference: the file in onnxruntime, the spec's normalization and head in numpy
    @property
    def _action_output(self) -> str:
        assert self.spec is not None
        return self.spec.action.output or next(iter(self._outputs))

    def _feeds(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        assert self.spec is not None
        x = self.norm.normalize(np.asarray(obs, np.float32).reshape(len(obs), -1))
        if not self.spec.per_key_inputs:
            name = self.spec.inputs[0]
            return {name: x.reshape(len(x), *self._inputs[name][1:])}
        return {
            name: x[:, part].reshape(len(x), *self._inputs[name][1:])
            for name, (_, part) in zip(self.spec.inputs, self.observation.key_slices, strict=True)
        }

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        rows = [self._session.run([self._action_output], self._feeds(o[None]))[0] for o in np.asarray(obs)]
        return np.concatenate(rows).reshape(len(rows), -1).astype(np.float32)

    def _head(self, out: np.ndarray) -> np.ndarray:
        transform = ActionTransform(self.action)
        if self.action.discrete:
            return numpy_head(self.head, out, transform, np.zeros(0), np.zeros(0))
        low, high = (np.asarray(b, np.float32) for b in (self.action.low, self.action.high))
        return numpy_head(self.head, out, transform, low, high)

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        return self._head(self.pre_head(obs))

    def cell_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        assert self.spec is not None
        feeds = self._feeds(x)
        keep = np.float32(1.0 - start)
        for s, value in zip(self.spec.state, states, strict=True):
            feeds[s.input] = (value * keep).reshape(self._inputs[s.input]).astype(np.float32)
        names = [self._action_output, *(s.output for s in self.spec.state)]
        out, *new = self._session.run(names, feeds)
        out = np.asarray(out, np.float32).reshape(1, -1)
        return self._head(out), out, [np.asarray(v, np.float32).reshape(1, -1) for v in new]

    # ---- the graph for the converter
    def write_onnx(self, path: Path) -> bool:
        import onnx

        from rl2edge.export.onnx_cells import unroll_recurrent_nodes

        model = compose(unroll_recurrent_nodes(self._model), self)
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
        return True

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        from rl2edge.export.tflite_convert import onnx_to_saved_model

        assert onnx_path is not None
        return onnx_to_saved_model(onnx_path, work / "saved_model")


def compose(inner: Any, source: OnnxFileSource) -> Any:
    """The deployable ONNX graph around the file's graph `inner` (module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    spec = source.spec
    assert spec is not None
    inner = onnx.compose.add_prefix(inner, PREFIX)
    g = inner.graph
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: Any, dtype: Any = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def op(kind: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
        return out

    f32 = lambda name, size: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, size])  # noqa: E731
    observation = source.observation
    inputs: list[Any] = []
    if observation.is_dict:  # one input per key, named after the key: the artifact contract's
        inputs += [f32(k.name, k.size) for k in observation.keys]
        x = op("Concat", [k.name for k in observation.keys], "observation", axis=-1)
    else:
        inputs.append(f32("obs", observation.size))
        x = "obs"
    if source.norm.enabled:
        mean, inv_std = (c.reshape(1, -1) for c in source.norm.constants())
        bound = source.norm.clip_bounds()
        limit = (
            np.full((1, observation.size), source.norm.clip, np.float32)
            if bound is None
            else bound.reshape(1, -1)
        )
        x = op(
            "Mul",
            [op("Sub", [x, const("norm_mean", mean)], "centered"), const("norm_inv_std", inv_std)],
            "scaled",
        )
        x = op(
            "Min",
            [op("Max", [x, const("norm_low", -limit)], "clipped_low"), const("norm_high", limit)],
            "normalized",
        )
    # the file's observation inputs, in the shapes it declares
    if spec.per_key_inputs:
        for name, (_, part) in zip(spec.inputs, observation.key_slices, strict=True):
            piece = op(
                "Slice",
                [x, const(f"{name}_start", [part.start], np.int64), const(f"{name}_stop", [part.stop], np.int64),
                 const(f"{name}_axis", [1], np.int64)],
                f"{name}_slice",
            )  # fmt: skip
            op("Reshape", [piece, const(f"{name}_shape", source._inputs[name], np.int64)], PREFIX + name)
    else:
        name = spec.inputs[0]
        op("Reshape", [x, const(f"{name}_shape", source._inputs[name], np.int64)], PREFIX + name)
    # the state: the contract's [1, size] inputs, zeroed at an episode's start, in the file's shapes
    outputs: list[Any] = []
    if spec.state:
        inputs.append(f32(EPISODE_START, 1))
        keep = op("Sub", [const("one", np.ones((1, 1))), EPISODE_START], "keep")
        for s, t in zip(spec.state, source.states, strict=True):
            inputs.append(f32(s.input, t.size))
            masked = op("Mul", [s.input, keep], f"{s.input}_masked")
            op(
                "Reshape",
                [masked, const(f"{s.input}_shape", source._inputs[s.input], np.int64)],
                PREFIX + s.input,
            )
    nodes.extend(g.node)
    inits.extend(g.initializer)
    # the head on the file's action output
    out = op("Reshape", [PREFIX + source._action_output, const("out_shape", [1, -1], np.int64)], "pre_head")
    action = source.action
    if source.head == "argmax":
        index = op("ArgMax", [out], "argmax", axis=-1, keepdims=0)
        result = op("Add", [index, const("start", [action.start], np.int64)], OUTPUT_NAME)
        outputs.append(helper.make_tensor_value_info(result, TensorProto.INT64, [1]))
    else:
        transform = ActionTransform(action)
        if source.head == "clip":
            low, high = (np.asarray(b, np.float32).reshape(1, -1) for b in (action.low, action.high))
            clipped = op("Min", [out, const("act_high", high)], "below_high")
            op("Max", [clipped, const("act_low", low)], OUTPUT_NAME)
        else:
            squashed = {
                "clip_unscale": lambda: op(
                    "Clip", [out, const("minus_one", -1.0), const("plus_one", 1.0)], "squashed"
                ),
                "tanh_unscale": lambda: op("Tanh", [out], "squashed"),
                "unscale": lambda: out,
            }[source.head]()
            scaled = op(
                "Mul", [squashed, const("half_range", transform.half_range.reshape(1, -1))], "scaled_action"
            )
            op("Add", [const("center", transform.center.reshape(1, -1)), scaled], OUTPUT_NAME)
        outputs.append(f32(OUTPUT_NAME, action.size))
    for s, t in zip(spec.state, source.states, strict=True):
        op("Reshape", [PREFIX + s.output, const(f"{s.output}_flat", [1, t.size], np.int64)], s.output)
        outputs.append(f32(s.output, t.size))
    graph = helper.make_graph(nodes, "rl2edge_policy", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=list(inner.opset_import), producer_name="rl2edge")
    model.ir_version = inner.ir_version
    return model
