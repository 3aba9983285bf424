"""The observation encoder of a Dict observation with camera keys: what the network spec records of it,
and which values of the flat observation are pixels.

rl2edge's networks see one flat float32 vector, the keys concatenated in the declared order. Vector keys
go to the MLP as they are (normalized); each image key goes through its own Nature-CNN (Mnih et al. 2015:
conv 8x8/4 32, conv 4x4/2 64, conv 3x3/1 64, ReLU after each, then a linear layer and ReLU), as SB3's
`MultiInputPolicy` (CombinedExtractor, `cnn_output_dim` 256) does, and the features are concatenated in
the key order. A uint8 frame bounded [0, 255] is not normalized (the normalizer leaves its pixels raw, as
SB3's VecNormalize leaves image keys out of `norm_obs_keys`) but scaled by 1/255 inside the network, as
SB3's `preprocess_obs` does; any other 3-D key (a float depth map, say) is normalized per value like a
vector key, then goes through its CNN. The three backends (torch, TensorFlow, the numpy rollout) build the same
encoder from this spec.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.specs import ObservationKey, ObservationSpec
from rl2edge.train.core.network_spec import EncoderKey, EncoderSpec
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.spaces import image_layout, network_view

CNN_OUTPUT_DIM = 256  # SB3's CombinedExtractor default
NATURE_CNN = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (channels, kernel, stride) per conv layer


def conv_out(size: int) -> int:
    """The Nature-CNN's output height (or width) for an input of `size` (no padding)."""
    for _, kernel, stride in NATURE_CNN:
        size = (size - kernel) // stride + 1
    return size


def _is_uint8_image(k: ObservationKey) -> bool:
    """SB3's is_image_space: uint8 with every bound 0 and 255 (then it scales by 1/255)."""
    return k.dtype == "uint8" and all(v == 0 for v in k.low) and all(v == 255 for v in k.high)


def chw(k: ObservationKey) -> tuple[int, int, int]:
    """An image key's (channels, height, width): channels are the axis of 1-4 (first or last)."""
    if image_layout(k.shape) == "HWC":
        return k.shape[2], k.shape[0], k.shape[1]
    return k.shape[0], k.shape[1], k.shape[2]


def encoder_spec(spec: ObservationSpec, cnn_output_dim: int = CNN_OUTPUT_DIM) -> EncoderSpec | None:
    """The network spec's `encoder`, or None when no key is an image (the MLP takes the flat vector)."""
    if not any(k.is_image for k in spec.keys):
        return None
    keys: list[EncoderKey] = []
    for k in spec.keys:
        if not k.is_image:
            keys.append(EncoderKey(k.name, k.size))
            continue
        _, h, w = chw(k)
        if conv_out(h) < 1 or conv_out(w) < 1:
            raise ConfigError(
                f"observation image {k.name!r} is {h}x{w}: the Nature-CNN (8x8/4, 4x4/2, 3x3/1) "
                "needs at least 36x36 pixels. Render the camera larger, or give it as a vector key"
            )
        keys.append(
            EncoderKey(
                k.name,
                k.size,
                image=True,
                shape=k.shape,
                channels_last=image_layout(k.shape) == "HWC",
                scale=1.0 / 255.0 if _is_uint8_image(k) else 1.0,
            )
        )
    return EncoderSpec(tuple(keys), int(cnn_output_dim))


def features_dim(encoder: EncoderSpec) -> int:
    """The width of the encoder's output: vector keys' sizes plus cnn_output_dim per image key."""
    return sum(encoder.cnn_output_dim if k.image else k.size for k in encoder.keys)


def cnn_flat_dim(key: EncoderKey) -> int:
    """The flattened size of an image key's last conv layer."""
    _, h, w = key.chw
    return NATURE_CNN[-1][0] * conv_out(h) * conv_out(w)


def in_channels(key: EncoderKey) -> int:
    return key.chw[0]


def image_mask(spec: ObservationSpec) -> np.ndarray | None:
    """The flat observation's uint8 pixels (a bool mask), which the network scales and the normalizer
    leaves raw; None without such frames. `spec`: the env's (an image Box is one image key) or the
    network's view."""
    spec = network_view(spec)
    if not any(k.is_image and _is_uint8_image(k) for k in spec.keys):
        return None
    mask = np.zeros(spec.size, bool)
    for k, (_, part) in zip(spec.keys, spec.key_slices, strict=True):
        mask[part] = k.is_image and _is_uint8_image(k)
    return mask


def checkpoint_normalizer(observation: ObservationSpec, d: dict[str, Any]) -> RunningNormalizer:
    """A checkpoint's normalizer as training used it: its statistics, with the pixels left raw."""
    norm = RunningNormalizer.from_dict(observation.shape, d)
    mask = image_mask(observation)  # flat: an image Box's, in the env's order
    norm.raw = None if mask is None else mask.reshape(observation.shape)
    return norm


def refuse_image_keys(spec: ObservationSpec, algo: str, takes: list[str]) -> None:
    """Refuse an image key for `algo`, whose networks take no encoder, naming the algorithms that do
    (`takes`, train.algos' rows with image_keys) and the SB3 route. An image Box outside a Dict is one
    image key."""
    images = [k for k in network_view(spec).keys if k.is_image]
    if images:
        k = images[0]
        what = f"Dict observation key {k.name!r} is" if spec.is_dict else "the observation is"
        raise ConfigError(
            f"{what} an image {k.shape}: rl2edge trains images with "
            f"{' and '.join(a.upper() for a in takes)} (a Nature-CNN per image key); {algo.upper()} does not "
            f"take them yet. Train with --algo {takes[0]}, or train with Stable-Baselines3's MultiInputPolicy "
            'and export the .zip: `rl2edge export model.zip --env ENV_ID` (docs/export.md, "Stable-Baselines3 '
            'models")'
        )
