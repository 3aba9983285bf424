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
    except Exception as exc:
        _logger.debug("onnx2tf output:\n%s", sink.getvalue())
        raise ExportError(f"onnx2tf could not convert {onnx_path.name}: {exc}") from exc
    if not (out_dir / "saved_model.pb").is_file():
        raise ExportError(f"onnx2tf wrote no SavedModel to {out_dir}:\n{sink.getvalue()[-2000:]}")
    return out_dir


def convert(saved_model: Path, mode: str, calibration: np.ndarray) -> bytes:
    """One TFLite flatbuffer. int8 is full-integer (int8 ops, int8 input, int8 output where the output is
    a float tensor), calibrated on `calibration`: observations from rollouts of the trained policy."""
    if mode not in MODES:
        raise ExportError(f"unknown quantization mode {mode!r}; choose one of {', '.join(MODES)}")
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    if mode != "fp32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    if mode == "int8":
        samples = calibration.astype(np.float32)

        def representative() -> Iterator[list[np.ndarray]]:
            for row in samples:
                yield [row[None]]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8  # applies to float outputs only (not an argmax index)
    try:
        return bytes(converter.convert())
    except Exception as exc:
        raise ExportError(f"TFLite conversion ({mode}) failed: {exc}") from exc
