"""Weights of a Keras model in memory (keep_best) and on disk (.weights.h5, written to a temporary file
and renamed): one place for every TF agent."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS_FILE = "policy.weights.h5"


def state_copy(model: Any) -> list[np.ndarray]:
    return [w.copy() for w in model.get_weights()]


def save_keras_weights(model: Any, run_dir: Path) -> str:
    """Write run_dir/policy.weights.h5 atomically (Keras needs the suffix, hence mkstemp); return its name."""
    fd, tmp = tempfile.mkstemp(dir=run_dir, suffix=".weights.h5")
    os.close(fd)
    try:
        model.save_weights(tmp, overwrite=True)
        os.replace(tmp, run_dir / WEIGHTS_FILE)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return WEIGHTS_FILE
