"""The observation encoder of the TF backend, the twin of train.torch_backend.encoder: a Nature-CNN per image
key of the flat observation, vector keys passed through, the features concatenated in the key order.

TensorFlow's CPU convolutions take channel-last (NHWC) only, so a frame goes in as HWC; the last conv's
output is transposed to channel-first before the flatten, so that the flattened features are in torch's
order and a weight copy between the backends is a plain transpose (tests/test_image_encoder.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from rl2edge.train.core.encoder_spec import NATURE_CNN, cnn_flat_dim, features_dim, in_channels
from rl2edge.train.core.network_spec import EncoderKey, EncoderSpec
from rl2edge.train.core.numpy_encoder import EncoderWeights, key_parts


def _hwc(key: EncoderKey) -> tuple[int, int, int]:
    c, h, w = key.chw
    return h, w, c


class TFObsEncoder(keras.layers.Layer):
    """flat [B, obs_dim] -> features [B, features_dim]. `orthogonal`: SB3's PPO/A2C init of the features
    extractor (gain sqrt(2), zero biases); else PyTorch's default, as the off-policy networks have it."""

    def __init__(
        self, spec: EncoderSpec, seeds: Iterator[int], name: str = "encoder", orthogonal: bool = True
    ):
        super().__init__(name=name)
        self.orthogonal = orthogonal
        self.spec = spec
        self.features_dim = features_dim(spec)
        self.cnns: dict[str, list[keras.layers.Layer]] = {}
        self._parts = key_parts(spec)
        for name, _, _, image in self._parts:
            if image is not None:
                self.cnns[name] = self._nature_cnn(image, spec.cnn_output_dim, seeds)
        self.built = True

    def _init(self, seeds: Iterator[int], fan_in: int) -> tuple[Any, Any]:
        """(kernel, bias) initializers: orthogonal and zeros, or PyTorch's default (uniform +-1/sqrt(fan_in))."""
        if self.orthogonal:
            return keras.initializers.Orthogonal(math.sqrt(2), seed=next(seeds)), "zeros"
        bound = 1.0 / math.sqrt(fan_in)
        seed = next(seeds)
        return (
            keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform", seed=seed),
            keras.initializers.RandomUniform(-bound, bound, seed=seed + 50),  # apart from every kernel's
        )

    def _nature_cnn(self, key: EncoderKey, out_dim: int, seeds: Iterator[int]) -> list[keras.layers.Layer]:
        layers: list[keras.layers.Layer] = []
        shape: tuple[int | None, ...] = (None, *_hwc(key))
        for filters, kernel, stride in NATURE_CNN:
            k_init, b_init = self._init(seeds, kernel * kernel * int(shape[-1] or 1))
            conv = keras.layers.Conv2D(
                filters, kernel, stride, activation="relu", kernel_initializer=k_init, bias_initializer=b_init
            )
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            layers.append(conv)
        assert in_channels(key) == _hwc(key)[2]
        k_init, b_init = self._init(seeds, cnn_flat_dim(key))
        dense = keras.layers.Dense(
            out_dim, activation="relu", kernel_initializer=k_init, bias_initializer=b_init
        )
        dense.build((None, cnn_flat_dim(key)))
        return [*layers, dense]

    @property
    def variables_in_order(self) -> list[tf.Variable]:
        """Every weight in a fixed order (kernel, bias per layer, keys in order): what copies and polyak
        updates between an encoder and its target pair up."""
        return [v for layers in self.cnns.values() for layer in layers for v in (layer.kernel, layer.bias)]

    def call(self, flat: tf.Tensor) -> tf.Tensor:
        feats = []
        for name, a, b, image in self._parts:
            x = flat[:, a:b]
            if image is not None:
                x = _cnn_forward(image, x, list(self.cnns[name]))
            feats.append(x)
        return tf.concat(feats, axis=-1)

    # --- weights across frameworks: torch's ObsEncoder.state_dict() names, and the numpy rollout's layout
    def pairs(self, prefix: str) -> list[tuple[str, tf.Variable]]:
        out = []
        for name, layers in self.cnns.items():
            base = f"{prefix}.cnns.{name}"
            for i, layer in enumerate(layers[:-1]):
                out += [
                    (f"{base}.cnn.{2 * i}.weight", layer.kernel),
                    (f"{base}.cnn.{2 * i}.bias", layer.bias),
                ]
            out += [
                (f"{base}.linear.0.weight", layers[-1].kernel),
                (f"{base}.linear.0.bias", layers[-1].bias),
            ]
        return out

    def numpy_weights(self) -> EncoderWeights:
        """As train.core.numpy_encoder takes them: conv weights [out, in, kh, kw], linear kernel [in, out]."""
        return {
            name: [
                *((c.kernel.numpy().transpose(3, 2, 0, 1), c.bias.numpy()) for c in layers[:-1]),
                (layers[-1].kernel.numpy(), layers[-1].bias.numpy()),
            ]
            for name, layers in self.cnns.items()
        }

    def frozen(self) -> Callable[[tf.Tensor], tf.Tensor]:
        """call() with the weights as graph constants (what export's SavedModel holds)."""
        consts = {
            name: [(tf.constant(layer.kernel.numpy()), tf.constant(layer.bias.numpy())) for layer in layers]
            for name, layers in self.cnns.items()
        }

        def conv(w: Any, stride: int) -> Callable[[tf.Tensor], tf.Tensor]:
            return lambda y: tf.nn.relu(tf.nn.conv2d(y, w[0], stride, "VALID") + w[1])

        def dense(w: Any) -> Callable[[tf.Tensor], tf.Tensor]:
            return lambda y: tf.nn.relu(tf.matmul(y, w[0]) + w[1])

        def encode(flat: tf.Tensor) -> tf.Tensor:
            feats = []
            for name, a, b, image in self._parts:
                x = flat[:, a:b]
                if image is not None:
                    w = consts[name]
                    fns = [conv(w[i], s) for i, (_, _, s) in enumerate(NATURE_CNN)] + [dense(w[-1])]
                    x = _cnn_forward(image, x, fns)
                feats.append(x)
            return tf.concat(feats, axis=-1)

        return encode


def _cnn_forward(key: EncoderKey, x: tf.Tensor, layers: list[Callable[[tf.Tensor], tf.Tensor]]) -> tf.Tensor:
    """A key's flat slice through its CNN: scaled on the flat slice (see train.torch_backend.encoder), to HWC,
    the convolutions, to CHW, flattened, the linear layer."""
    if key.scale != 1.0:
        x = x * np.float32(key.scale)
    x = tf.reshape(x, [-1, *key.shape])
    if not key.channels_last:
        x = tf.transpose(x, [0, 2, 3, 1])
    for layer in layers[:-1]:
        x = layer(x)
    x = tf.transpose(x, [0, 3, 1, 2])
    return layers[-1](tf.reshape(x, [-1, cnn_flat_dim(key)]))


def copy_value(name: str, value: np.ndarray) -> np.ndarray:
    """A torch tensor's value in the Keras variable's layout: Linear [out, in] -> [in, out], Conv2d
    [out, in, kh, kw] -> [kh, kw, in, out]; biases as they are."""
    if not name.endswith(".weight"):
        return value
    return value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T
