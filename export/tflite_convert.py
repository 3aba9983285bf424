"""ONNX -> TF SavedModel (onnx2tf) -> TFLite in each quantization mode (TFLiteConverter).

onnx2tf does the graph conversion; all four modes are then made by one TFLiteConverter from that
SavedModel, so the TF-trained route (SavedModel from a tf.function) shares this code.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ExportError

_logger = logging.getLogger(__name__)

MODES = ("fp32", "fp16", "dynamic", "int8")


def onnx_to_saved_model(onnx_path: Path, out_dir: Path) -> Path:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import onnx2tf

    # onnx2tf prints to stdout; library code keeps stdout for the CLI's tables.
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            onnx2tf.convert(
                input_onnx_file_path=str(onnx_path),
                output_folder_path=str(out_dir),
                non_verbose=True,
                copy_onnx_input_output_names_to_tflite=True,
            )
    except ModuleNotFoundError as exc:  # onnx2tf keeps one module per op it converts
        _logger.debug("onnx2tf output:\n%s", sink.getvalue())
        op = (exc.name or "").removeprefix("onnx2tf.ops.")
        if not exc.name or not exc.name.startswith("onnx2tf.ops."):
            raise ExportError(f"onnx2tf could not convert {onnx_path.name}: {exc}") from exc
        raise ExportError(
            f"the converter (onnx2tf) has no conversion for the model's op {op} (its message: {exc}); replace the "
            "op in the model, or export the policy without it"
        ) from None
    except Exception as exc:
        _logger.debug("onnx2tf output:\n%s", sink.getvalue())
        raise ExportError(f"onnx2tf could not convert {onnx_path.name}: {exc}") from exc
    if not (out_dir / "saved_model.pb").is_file():
        raise ExportError(f"onnx2tf wrote no SavedModel to {out_dir}:\n{sink.getvalue()[-2000:]}")
    return out_dir


def uint8_input_saved_model(saved_model: Path, out_dir: Path) -> Path:
    """The same graph behind a uint8 input: a CAST to float32 first, then the float graph unchanged.

    For observation spaces of dtype uint8 (image frames): the float files (fp32, fp16, dynamic) then take
    the frames as the env gives them, and the cast, exact for every uint8 value, runs inside the invoke
    instead of in numpy before it (a 84x84x4 frame: a 28k-element float copy per call, which also leaves
    the invoke a cold buffer). int8 files have their own integer input (scale 1,
    zero point -128), which the runtime feeds from uint8 frames without a float step."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(saved_model))
    fn = loaded.signatures["serving_default"]
    args, kwargs = fn.structured_input_signature
    # the observation: the one input, or `obs` beside a stateful graph's (episode_start, its state), which
    # stay float32 as they are
    name = next(iter(kwargs)) if len(kwargs) == 1 else "obs"
    if args or name not in kwargs:
        raise ExportError(
            f"a uint8 input wraps a graph with one observation input (`obs`); {saved_model} takes {sorted(kwargs)}"
        )
    spec = kwargs[name]
    if spec.dtype != tf.float32:
        raise ExportError(f"{saved_model} takes {spec.dtype.name} observations; expected float32")
    others = sorted(k for k in kwargs if k != name)
    signature = [tf.TensorSpec(spec.shape, tf.uint8, name=name)]
    signature += [tf.TensorSpec(kwargs[k].shape, kwargs[k].dtype, name=k) for k in others]

    @tf.function(input_signature=signature)
    def serve(obs: Any, *rest: Any) -> Any:
        return fn(**{name: tf.cast(obs, tf.float32)}, **dict(zip(others, rest, strict=True)))

    module = tf.Module()
    module.graph, module.serve = loaded, serve  # keeps the wrapped graph's variables reachable for saving
    tf.saved_model.save(module, str(out_dir), signatures={"serving_default": serve})
    return out_dir


# Ops that hold the folded normalization and the action head. In int8 files they stay in float32: the
# observation is normalized exactly as in training, and only the network, whose input is then
# well-scaled, is quantized. Quantizing raw observations per tensor would give a small-range feature
# (CartPole's pole angle, +-0.2 rad, next to positions of +-2.4 m) a handful of levels.
# Rainbow's C51 head (softmax over atoms, times the support, summed; the dueling mean) stays float32 too:
# int8 probabilities have a fixed 1/256 step, and summed over 51 atoms times a support of tens that is an
# error in the expected Q larger than the gaps between actions that the argmax decides on. So does the
# ARG_MAX (left alone, the converter quantizes its input: Q-values of -100..0 in steps of 0.4) and the
# RESHAPE between the output layers and the head.
# A Dict observation's CONCATENATION of its keys, before the normalization, stays float32 too: quantized, the
# raw keys (lidar in metres next to cos/sin of a bearing) would share one int8 scale. So do the ops that cut
# a key back out of the normalized vector and lay it out for its extractor (an SB3 MultiInputPolicy's
# STRIDED_SLICE, RESHAPE, TRANSPOSE): quantized there, a camera's pixels (0..255, raw) and a normalized
# rate (+-5) shared one scale whose range the rate set, and every pixel above 1.7 was clipped.
FLOAT_OPS = [
    "SUB", "MUL", "ADD", "MINIMUM", "MAXIMUM", "SOFTMAX", "SUM", "MEAN", "ARG_MAX", "RESHAPE", "CONCATENATION",
    "STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V", "GATHER", "TRANSPOSE",
]  # fmt: skip

# A stateful graph's gates (a recurrent cell's LOGISTIC and TANH) stay float32 too: the cell state is
# fed back every step, so int8's fixed output steps of the gates (1/256 for LOGISTIC) would add up over an
# episode rather than stay one step's error. Its FULLY_CONNECTED gates are input layers (they take the
# observation and the state inputs), which stay float32 by the rule below.
STATE_FLOAT_OPS = ["LOGISTIC", "TANH"]

# The input layer and the output layers stay float32 as well; the hidden layers between them, where almost
# all the multiply-adds are, are int8.
# - Input layer (the first FULLY_CONNECTED or CONV_2D on the normalized observation): TFLite quantizes
#   activations per tensor, so one int8 scale covers every feature, set by the widest one (+-3..10 std
#   after clipping); a feature near its mean, where a balancing policy spends its time, moves in coarse
#   steps.
# - Output layers (the last FULLY_CONNECTED before the head): Q-values of tens to hundreds whose gaps
#   between actions are a fraction of one, which an int8 output scale rounds away.
# Figures: benchmarks/results/returns_a2c_rainbow.md (int8 keeps A2C's and Rainbow CartPole's fp32
# returns) and returns_dqn_int8.md (DQN CartPole torch int8 475.0, against 344.5 in returns.md, made
# with both layers int8).
LAYER_OPS = ("FULLY_CONNECTED", "CONV_2D")


def float_layer_nodes(model: bytes) -> list[str]:
    """Output tensor names of the input layers (the first FULLY_CONNECTED/CONV_2D on each path from an
    input) and the output layers (the last on each path to an output), found in a float TFLite model."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_content=model)
    names = {t["index"]: t["name"] for t in interp.get_tensor_details()}
    ops = [op for op in interp._get_ops_details() if op["op_name"] != "DELEGATE"]  # topological order
    after_layer: set[int] = set()  # tensors downstream of some layer
    nodes: list[str] = []
    for op in ops:
        inputs = [i for i in op["inputs"] if i >= 0]
        if op["op_name"] in LAYER_OPS and inputs and inputs[0] not in after_layer:
            nodes.append(names[op["outputs"][0]])
        if op["op_name"] in LAYER_OPS or any(i in after_layer for i in inputs):
            after_layer.update(op["outputs"])
    producer = {t: op for op in ops for t in op["outputs"]}
    stack, seen = [d["index"] for d in interp.get_output_details()], set()
    while stack:  # back from the outputs through the head's ops to the layers that feed it
        t = stack.pop()
        if t in seen or t not in producer:
            continue
        seen.add(t)
        op = producer[t]
        if op["op_name"] in LAYER_OPS:
            nodes.append(names[op["outputs"][0]])
        else:
            stack.extend(i for i in op["inputs"] if i >= 0)
    return list(dict.fromkeys(nodes))


def convert(
    saved_model: Path,
    mode: str,
    calibration: np.ndarray,
    float_io_ops: bool = True,
    extra: dict[str, np.ndarray] | None = None,
    observation_keys: list[tuple[str, slice]] | None = None,
    extra_float_ops: list[str] | tuple[str, ...] = (),
) -> bytes:
    """One TFLite flatbuffer, calibrated (int8) on `calibration`: observations from rollouts of the
    trained policy. int8: int8 weights and activations in the network; with `float_io_ops` the
    normalization, the input and output layers and the head stay float32 (float input and output), without it the whole graph is
    int8 with int8 input and output (image policies, whose raw pixels quantize well). `extra`: calibration
    rows of further inputs (folded noise), by signature name, fed with the observations as a dict.
    `observation_keys`: a Dict observation's inputs, each fed its slice of the calibration rows.
    `extra_float_ops`: op types kept float32 beyond FLOAT_OPS (STATE_FLOAT_OPS for a stateful graph)."""
    if mode not in MODES:
        raise ExportError(f"unknown quantization mode {mode!r}; choose one of {', '.join(MODES)}")
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    if mode != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    try:
        if mode != "int8":
            return bytes(converter.convert())
        samples = calibration.astype(np.float32)

        def representative() -> Iterator[Any]:
            for i, row in enumerate(samples):
                if observation_keys:
                    obs = {name: row[None, part] for name, part in observation_keys}
                elif extra:
                    obs = {"obs": row[None]}
                else:
                    yield [row[None]]
                    continue
                yield {**obs, **{k: v[i % len(v)][None] for k, v in (extra or {}).items()}}

        converter.representative_dataset = representative
        if not float_io_ops:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8  # applies to float outputs only (not an argmax index)
            return bytes(converter.convert())
        float_model = bytes(tf.lite.TFLiteConverter.from_saved_model(str(saved_model)).convert())
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
            tf.lite.OpsSet.TFLITE_BUILTINS,
        ]
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter,
            debug_dataset=representative,
            debug_options=tf.lite.experimental.QuantizationDebugOptions(
                denylisted_ops=FLOAT_OPS + list(extra_float_ops),
                denylisted_nodes=float_layer_nodes(float_model),
            ),
        )
        return bytes(debugger.get_nondebug_quantized_model())
    except Exception as exc:
        raise ExportError(f"TFLite conversion ({mode}) failed: {exc}") from exc
