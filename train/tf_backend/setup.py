"""TensorFlow process settings: done once, before any op runs."""

from __future__ import annotations

import logging
import os

from rl2edge.errors import ConfigError

_logger = logging.getLogger(__name__)


def configure_tensorflow(device: str) -> str:
    """Pick the device; on a GPU grow memory as needed instead of taking the whole card. Returns the device."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from rl2edge.train.core.threads import cpu_threads

    gpus = tf.config.list_physical_devices("GPU")
    if device == "cuda" and not gpus:
        raise ConfigError("--device cuda was asked for but TensorFlow sees no GPU; use --device cpu or auto")
    try:
        if device == "cpu" or not gpus:
            tf.config.set_visible_devices([], "GPU")
            # Small MLPs: inter-op threads only add scheduling noise; intra-op threads as train.core.threads
            # says (default one: fastest on 64-wide nets).
            tf.config.threading.set_inter_op_parallelism_threads(1)
            tf.config.threading.set_intra_op_parallelism_threads(cpu_threads())
            return "cpu"
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError as exc:  # already initialized in this process (tests): keep what is set
        _logger.debug("TensorFlow already configured: %s", exc)
    return "gpu" if gpus and device != "cpu" else "cpu"
