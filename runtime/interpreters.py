"""Interpreter backends: one small class per engine, the same `run(x) -> y` for all.

TFLite models run on the first of ai-edge-litert, tflite-runtime, tensorflow.lite that imports;
ONNX models run on onnxruntime. Each engine is imported only when chosen.

`x` is the observation as one row (1, n). A Dict observation's graph takes one named input per key
(`observation_keys`, in the manifest's order): the backend feeds each from its slice of the row, a view,
so that the caller's path (validation, the model process's pipe) stays one array.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.errors import BackendError

_logger = logging.getLogger(__name__)


class Backend(Protocol):
    """What `Policy` needs of an engine: in-process (below) or in its own process (runtime.model_process)."""

    name: str
    format: str  # "tflite" or "onnx": the model file's layout conventions (NHWC or NCHW images)
    input_name: str
    output_name: str
    input_shape: tuple[int, ...]
    input_dtype: np.dtype
    output_dtype: np.dtype
    input_quant: tuple[float, int] | None
    output_quant: tuple[float, int] | None
    extra_inputs: dict[str, Any]
    extra_outputs: dict[str, Any]
    key_sizes: tuple[tuple[str, int], ...]
    """A Dict observation's graph inputs, (name, values) in the manifest's order; () for one input."""

    def run(self, x: np.ndarray) -> np.ndarray: ...

    def run_with(
        self, x: np.ndarray, feeds: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...


# name -> module holding an `Interpreter` class with the tf.lite API
TFLITE_ENGINES = {
    "litert": "ai_edge_litert.interpreter",
    "tflite-runtime": "tflite_runtime.interpreter",
    "tensorflow": "tensorflow.lite",
}


def _key_slices(sizes: list[tuple[str, int]]) -> list[tuple[str, slice]]:
    out, start = [], 0
    for name, size in sizes:
        out.append((name, slice(start, start + size)))
        start += size
    return out


class TFLiteBackend:
    format = "tflite"

    def __init__(
        self, model_path: Path, engine: str, num_threads: int, observation_keys: tuple[str, ...] = ()
    ):
        module = importlib.import_module(TFLITE_ENGINES[engine])
        try:
            self._it = module.Interpreter(model_path=str(model_path), num_threads=num_threads)
            self._it.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{engine} cannot load {model_path}: {exc}") from None
        inputs, outputs = self._it.get_input_details(), self._it.get_output_details()
        # Graphs with folded noise take more than the observation; their tensors are found by signature name.
        self.extra_inputs: dict[str, int] = {}
        self.extra_outputs: dict[str, int] = {}
        self._keyed: list[tuple[int, slice]] = []
        self.key_sizes: tuple[tuple[str, int], ...] = ()
        if observation_keys:
            inputs, outputs = self._by_keys(model_path, observation_keys)
        elif len(inputs) != 1 or len(outputs) != 1:
            inputs, outputs = self._by_signature(model_path)
        self.name = engine
        self._in, self._out = inputs[0]["index"], outputs[0]["index"]
        self.input_name, self.output_name = str(inputs[0]["name"]), str(outputs[0]["name"])
        self.input_dtype = np.dtype(inputs[0]["dtype"])
        self.input_shape = tuple(int(d) for d in inputs[0]["shape"])
        self.output_dtype = np.dtype(outputs[0]["dtype"])
        self.input_quant = _quant(inputs[0])
        self.output_quant = _quant(outputs[0])

    def _by_signature(self, model_path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """obs and action first, the others by name (noise, ou_state -> ou_state_out)."""
        signatures = self._it.get_signature_list()
        if len(signatures) != 1:
            raise BackendError(
                f"{model_path} has several inputs but {len(signatures)} signatures; expected 1"
            )
        runner = self._it.get_signature_runner(next(iter(signatures)))
        ins, outs = runner.get_input_details(), runner.get_output_details()
        if "obs" not in ins or "action" not in outs:
            raise BackendError(
                f"{model_path} has inputs {sorted(ins)} and outputs {sorted(outs)}; expected obs and action"
            )
        self.extra_inputs = {k: int(v["index"]) for k, v in ins.items() if k != "obs"}
        self.extra_outputs = {k: int(v["index"]) for k, v in outs.items() if k != "action"}
        return [ins["obs"]], [outs["action"]]

    def _by_keys(
        self, model_path: Path, keys: tuple[str, ...]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """A Dict observation's graph: one float input per key, found by signature name; the observation
        is described as the keys' concatenation (1, n)."""
        signatures = self._it.get_signature_list()
        if len(signatures) != 1:
            raise BackendError(f"{model_path} has {len(signatures)} signatures; expected 1")
        runner = self._it.get_signature_runner(next(iter(signatures)))
        ins, outs = runner.get_input_details(), runner.get_output_details()
        missing = [k for k in keys if k not in ins]
        if missing or "action" not in outs:
            raise BackendError(
                f"{model_path} has inputs {sorted(ins)} and outputs {sorted(outs)}; the manifest's Dict "
                f"observation needs inputs {list(keys)} and an output named action"
            )
        for k in keys:
            if np.dtype(ins[k]["dtype"]) != np.float32 or _quant(ins[k]) is not None:
                raise BackendError(
                    f"{model_path}: input {k!r} is not float32; Dict observations are fed as floats"
                )
        sizes = [(k, int(np.prod(ins[k]["shape"]))) for k in keys]
        self.key_sizes = tuple(sizes)
        self._keyed = [(int(ins[k]["index"]), s) for k, s in _key_slices(sizes)]
        self.extra_inputs = {k: int(v["index"]) for k, v in ins.items() if k not in keys}
        self.extra_outputs = {k: int(v["index"]) for k, v in outs.items() if k != "action"}
        total = sum(n for _, n in sizes)
        observation = {**ins[keys[0]], "name": ",".join(keys), "shape": np.array([1, total])}
        return [observation], [outs["action"]]

    def _set_observation(self, x: np.ndarray) -> None:
        if not self._keyed:
            self._it.set_tensor(self._in, x)
            return
        row = x.reshape(1, -1)
        for index, part in self._keyed:
            self._it.set_tensor(index, row[:, part])

    def run(self, x: np.ndarray) -> np.ndarray:
        self._set_observation(x)
        self._it.invoke()
        return self._it.get_tensor(self._out)

    def run_with(
        self, x: np.ndarray, feeds: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Run with the extra inputs (named as in the manifest); the extra outputs by name."""
        self._set_observation(x)
        for name, value in feeds.items():
            self._it.set_tensor(self.extra_inputs[name], value)
        self._it.invoke()
        extras = {name: self._it.get_tensor(i) for name, i in self.extra_outputs.items()}
        return self._it.get_tensor(self._out), extras


def _quant(detail: dict[str, Any]) -> tuple[float, int] | None:
    scale, zero_point = detail.get("quantization", (0.0, 0))
    return (float(scale), int(zero_point)) if scale else None


class OnnxBackend:
    format = "onnx"

    def __init__(self, model_path: Path, num_threads: int, observation_keys: tuple[str, ...] = ()):
        try:
            import onnxruntime as ort
        except ImportError:
            raise BackendError("onnxruntime is not installed; install it or use the .tflite model") from None
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = num_threads
        opts.inter_op_num_threads = 1
        try:
            self._sess = ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise BackendError(f"onnxruntime cannot load {model_path}: {exc}") from None
        inp, out = self._sess.get_inputs(), self._sess.get_outputs()
        self.name = "onnxruntime"
        self._keyed: list[tuple[str, slice]] = []
        self.key_sizes: tuple[tuple[str, int], ...] = ()
        if observation_keys:
            shapes = {i.name: i.shape for i in inp}
            missing = [k for k in observation_keys if k not in shapes]
            if missing:
                raise BackendError(
                    f"{model_path} has inputs {sorted(shapes)}; the manifest's Dict observation needs "
                    f"{list(observation_keys)}"
                )
            sizes = [(k, int(np.prod(shapes[k]))) for k in observation_keys]
            self.key_sizes = tuple(sizes)
            self._keyed = _key_slices(sizes)
            self.input_shape: tuple[int, ...] = (1, sum(n for _, n in sizes))
            self._in_name = ",".join(observation_keys)
            self.extra_inputs = {i.name: i.name for i in inp if i.name not in observation_keys}
        else:
            self._in_name = inp[0].name
            self.input_shape = tuple(int(d) for d in inp[0].shape)
            self.extra_inputs = {i.name: i.name for i in inp[1:]}
        self.extra_outputs = {o.name: o.name for o in out[1:]}
        self._out_name = out[0].name
        self.input_name, self.output_name = self._in_name, self._out_name
        self.input_dtype = np.dtype(np.float32)
        self.output_dtype = np.dtype(np.int64 if "int64" in out[0].type else np.float32)
        self.input_quant: tuple[float, int] | None = None  # ONNX files are float end to end
        self.output_quant: tuple[float, int] | None = None

    def _observation(self, x: np.ndarray) -> dict[str, np.ndarray]:
        if not self._keyed:
            return {self._in_name: x}
        row = x.reshape(1, -1)
        return {name: row[:, part] for name, part in self._keyed}

    def run(self, x: np.ndarray) -> np.ndarray:
        return self._sess.run([self._out_name], self._observation(x))[0]

    def run_with(
        self, x: np.ndarray, feeds: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        names = [self._out_name, *self.extra_outputs]
        values = self._sess.run(names, {**self._observation(x), **feeds})
        return values[0], dict(zip(names[1:], values[1:], strict=True))


def open_backend(
    model_path: Path, backend: str = "auto", num_threads: int = 1, observation_keys: tuple[str, ...] = ()
) -> Backend:
    """Open `model_path` with the named engine, or the first available one for its format.
    `observation_keys`: a Dict observation's keys, in the manifest's order (one graph input each)."""
    keys = tuple(observation_keys)
    if model_path.suffix == ".onnx" or backend == "onnxruntime":
        if model_path.suffix != ".onnx":
            raise BackendError(f"onnxruntime runs .onnx models, not {model_path.name}")
        return OnnxBackend(model_path, num_threads, keys)
    if backend != "auto":
        if backend not in TFLITE_ENGINES:
            raise BackendError(
                f"unknown backend {backend!r}; choose auto, onnxruntime or one of {', '.join(TFLITE_ENGINES)}"
            )
        try:
            return TFLiteBackend(model_path, backend, num_threads, keys)
        except ImportError:
            raise BackendError(f"backend {backend!r} is not installed ({TFLITE_ENGINES[backend]})") from None
    for engine in TFLITE_ENGINES:
        try:
            return TFLiteBackend(model_path, engine, num_threads, keys)
        except ImportError:
            _logger.debug("TFLite engine %s not installed", engine)
    raise BackendError("no TFLite interpreter is installed: pip install ai-edge-litert (or tflite-runtime)")
