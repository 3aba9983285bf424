"""A TF checkpoint as an export source: the deployable graph as a tf.function (normalization, actor and
head folded in, the same float32 formulas as the torch route), saved as a SavedModel that the same
TFLiteConverter step turns into every quantization mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from export.source import ExportSource
from rl2edge.errors import CheckpointError
from train.core.actions import ActionTransform
from train.core.checkpoint import Checkpoint
from train.core.normalization import RunningNormalizer


def _frozen_actor(model: Any) -> Any:
    """The actor MLP with its weights as graph constants. A SavedModel whose Keras 3 variables are left
    as variables converts to a TFLite file that reads them as zeros; constants convert exactly."""
    import keras
    import tensorflow as tf

    layers = [
        (tf.constant(layer.kernel.numpy()), tf.constant(layer.bias.numpy()), layer.activation)
        for layer in model.actor.layers
        if isinstance(layer, keras.layers.Dense)
    ]

    def actor(x):
        for kernel, bias, activation in layers:
            x = activation(tf.matmul(x, kernel) + bias)
        return x

    return actor


def _deployable_module(model: Any, norm: RunningNormalizer, action_spec: dict[str, Any], obs_dim: int) -> Any:
    import tensorflow as tf

    actor = _frozen_actor(model)
    mean, inv_std = (c.reshape(-1) for c in norm.constants())
    clip = float(norm.clip) if norm.enabled else None
    transform = ActionTransform(action_spec)

    class Deployable(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="rl2edge_policy")
            self.serve = tf.function(
                self._forward, input_signature=[tf.TensorSpec([1, obs_dim], tf.float32, name="obs")]
            )
            self.batch = tf.function(
                self._forward, input_signature=[tf.TensorSpec([None, obs_dim], tf.float32)]
            )
            self.pre_head = tf.function(
                self._pre_head, input_signature=[tf.TensorSpec([None, obs_dim], tf.float32)]
            )

        def _pre_head(self, obs):
            x = (obs - tf.constant(mean)) * tf.constant(inv_std)
            if clip is not None:
                x = tf.clip_by_value(x, -clip, clip)
            return actor(x)

        def _forward(self, obs):
            out = self._pre_head(obs)
            if transform.discrete:
                action = tf.argmax(out, axis=-1)
                return {"action": action + transform.start if transform.start else action}
            center, half = tf.constant(transform.center), tf.constant(transform.half_range)
            return {"action": center + tf.clip_by_value(out, -1.0, 1.0) * half}

    return Deployable()


@dataclass
class TFSource(ExportSource):
    module: Any = None

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        return self.module.batch(np.asarray(obs, np.float32))["action"].numpy()

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        return self.module.pre_head(np.asarray(obs, np.float32)).numpy()

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        import tensorflow as tf

        path = work / "saved_model"
        tf.saved_model.save(self.module, str(path), signatures={"serving_default": self.module.serve})
        return path


def tf_source(ckpt: Checkpoint, description: dict[str, Any]) -> TFSource:
    from train.tf_backend.policy import TFActorCritic
    from train.tf_backend.setup import configure_tensorflow

    configure_tensorflow("cpu")
    meta = ckpt.meta
    if meta["network"].get("type") != "actor_critic_mlp":
        raise CheckpointError(f"unknown network type {meta['network'].get('type')!r} in {ckpt.path}")
    model = TFActorCritic.from_network_spec(meta["network"])
    try:
        model.load_weights(str(ckpt.weights_path))
    except Exception as exc:  # h5py and Keras raise several types for a bad file
        raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None
    shape = tuple(meta["observation_space"]["shape"])
    norm = RunningNormalizer.from_dict(shape, meta["normalization"])
    head = "argmax" if meta["network"]["discrete"] else "clip_unscale"
    module = _deployable_module(model, norm, meta["action_space"], int(np.prod(shape)))
    return TFSource(
        ckpt.env_id,
        meta["observation_space"],
        meta["action_space"],
        norm,
        head,
        description,
        "source (tf)",
        module=module,
    )
