"""What a TFLite file's ops do with its inputs, read through the interpreter (for the camera tests)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def assert_float_until_first_conv(model: Path) -> None:
    """No QUANTIZE before the first convolution, whose input is float32: the ops that cut a camera out of
    the keys' vector and scale it stay float (export's FLOAT_OPS), so the pixels (0..255, raw) and the
    normalized vector keys never share one int8 scale."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(model))
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interp.get_tensor_details()}
    ops = interp._get_ops_details()
    first_conv = next(i for i, op in enumerate(ops) if op["op_name"] == "CONV_2D")
    assert "QUANTIZE" not in [op["op_name"] for op in ops[:first_conv]]
    assert dtypes[ops[first_conv]["inputs"][0]] == "float32"
    # and the file is quantized after it: the other convolutions and dense layers take int8
    later = [op for op in ops[first_conv + 1 :] if op["op_name"] in ("CONV_2D", "FULLY_CONNECTED")]
    assert any(dtypes[op["inputs"][0]] == "int8" for op in later), "no int8 layer after the first conv"


def op_names(model: Path) -> list[str]:
    """The file's ops in order, by their TFLite names (FULLY_CONNECTED, LOGISTIC, WHILE, ...)."""
    import tensorflow as tf

    return [op["op_name"] for op in tf.lite.Interpreter(model_path=str(model))._get_ops_details()]
