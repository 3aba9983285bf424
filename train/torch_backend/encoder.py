"""The observation encoder of the torch backend (train.core.encoder_spec): a Nature-CNN per image key of the
flat observation, vector keys passed through, the features concatenated in the key order.

The same module is what export traces: a key's values are a slice of the flat (normalized) vector, scaled
on the flat slice before the reshape (onnx2tf 1.29 fails on a binary op whose output has two equal dims, a
square frame; export/sb3.py does the same), then reshaped to the key's shape and, channel-last frames,
permuted to channel-first.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rl2edge.train.core.encoder_spec import NATURE_CNN, cnn_flat_dim, features_dim, in_channels
from rl2edge.train.core.network_spec import EncoderKey, EncoderSpec
from rl2edge.train.core.numpy_encoder import EncoderWeights, key_parts


class NatureCNN(nn.Module):
    """SB3's NatureCNN, its submodule names too (`cnn`, `linear`): conv 8/4, 4/2, 3/1, flatten, linear."""

    def __init__(self, key: EncoderKey, out_dim: int, orthogonal: bool):
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels(key)
        for out_channels, kernel, stride in NATURE_CNN:
            layers += [nn.Conv2d(channels, out_channels, kernel, stride), nn.ReLU()]
            channels = out_channels
        self.cnn = nn.Sequential(*layers, nn.Flatten())
        self.linear = nn.Sequential(nn.Linear(cnn_flat_dim(key), out_dim), nn.ReLU())
        if orthogonal:  # SB3's PPO/A2C init of the features extractor: orthogonal, gain sqrt(2), zero bias
            for m in self.modules():
                if isinstance(m, nn.Conv2d | nn.Linear):
                    nn.init.orthogonal_(m.weight, math.sqrt(2))
                    nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(x))


class ObsEncoder(nn.Module):
    """flat [B, obs_dim] -> features [B, features_dim]."""

    def __init__(self, spec: EncoderSpec, orthogonal: bool = False):
        super().__init__()
        self.spec = spec
        self.features_dim = features_dim(spec)
        self.cnns = nn.ModuleDict(
            {k.name: NatureCNN(k, spec.cnn_output_dim, orthogonal) for k in spec.keys if k.image}
        )
        self._parts = key_parts(spec)

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        feats = []
        for name, a, b, image in self._parts:
            x = flat[:, a:b]
            if image is not None:
                if image.scale != 1.0:
                    x = x * image.scale
                x = x.reshape(-1, *image.shape)
                if image.channels_last:
                    x = x.permute(0, 3, 1, 2)
                x = self.cnns[name](x)
            feats.append(x)
        return torch.cat(feats, dim=-1)


def encoder_weights(encoder: ObsEncoder | None) -> EncoderWeights | None:
    """The encoder's weights for the numpy rollout (train.core.numpy_encoder): convolutions as torch lays
    them out, the linear layer's kernel [in, out]."""
    if encoder is None:
        return None
    out: EncoderWeights = {}
    for name, cnn in encoder.cnns.items():
        convs = [m for m in cnn.cnn if isinstance(m, nn.Conv2d)]
        layers = [(c.weight.detach().cpu().numpy(), c.bias.detach().cpu().numpy()) for c in convs]
        linear = cnn.linear[0]
        layers.append((linear.weight.detach().cpu().numpy().T, linear.bias.detach().cpu().numpy()))
        out[name] = layers
    return out
