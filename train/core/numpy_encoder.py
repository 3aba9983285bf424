"""The observation encoder (train.core.encoder_spec) in numpy, for the rollout's numpy policy
(train.core.numpy_policy): a Ray rollout worker imports no framework, and the rollout's forward passes stay
the same arithmetic wherever they run.

Each convolution is a tensordot over strided windows (numpy's sliding_window_view: no copy until the
product), laid out as torch's: activations [B, C, H, W], weights [out, in, kh, kw], flattened channel-first.
The numbers differ from a framework's convolution in the last bits (another summation order), as the MLPs'
do; tests/test_image_encoder.py holds both backends' act to this one.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rl2edge.train.core.encoder_spec import NATURE_CNN
from rl2edge.train.core.network_spec import EncoderKey, EncoderSpec

Layer = tuple[np.ndarray, np.ndarray]
EncoderWeights = dict[str, list[Layer]]
"""Per image key: its three convolutions (weight [out, in, kh, kw], bias [out]), then its linear layer
(kernel [in, out], bias [out])."""


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """A valid (unpadded) convolution of x [B, C, H, W]; [B, out, H', W']."""
    k = weight.shape[-1]
    windows = sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]  # type: ignore[call-overload]  # numpy's stubs take one axis  # [B, C, H', W', k, k]
    out = np.tensordot(windows, weight, axes=([1, 4, 5], [1, 2, 3]))  # [B, H', W', out]
    out += bias
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


KeyPart = tuple[str, int, int, EncoderKey | None]
"""A key's name, its slice of the flat observation (start, stop) and, an image key, its spec."""


def key_parts(spec: EncoderSpec) -> list[KeyPart]:
    """Each key's place in the flat observation, in order: what every backend's encoder walks."""
    parts: list[KeyPart] = []
    start = 0
    for k in spec.keys:
        parts.append((k.name, start, start + k.size, k if k.image else None))
        start += k.size
    return parts


class NumpyEncoder:
    def __init__(self, spec: EncoderSpec):
        self.spec = spec
        self._parts = key_parts(spec)
        self._w: EncoderWeights = {}

    def load(self, weights: EncoderWeights) -> None:
        self._w = {
            name: [(np.array(w, np.float32, order="C"), np.array(b, np.float32)) for w, b in layers]
            for name, layers in weights.items()
        }

    def __call__(self, flat: np.ndarray) -> np.ndarray:
        feats = []
        for name, a, b, image in self._parts:
            x = flat[:, a:b]
            if image is not None:
                x = self._cnn(name, image, x)
            feats.append(x)
        return np.concatenate(feats, axis=-1).astype(np.float32, copy=False)

    def _cnn(self, name: str, image: EncoderKey, x: np.ndarray) -> np.ndarray:
        layers = self._w[name]
        if image.scale != 1.0:
            x = x * np.float32(image.scale)
        x = x.reshape(-1, *image.shape)
        if image.channels_last:
            x = x.transpose(0, 3, 1, 2)
        for (weight, bias), (_, _, stride) in zip(layers[:-1], NATURE_CNN, strict=True):
            x = np.maximum(conv2d(x, weight, bias, stride), 0.0)
        kernel, bias = layers[-1]
        return np.maximum(x.reshape(x.shape[0], -1) @ kernel + bias, 0.0)
