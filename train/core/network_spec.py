"""The checkpoint's `network`: which networks a run trained and their sizes, as a type. The driver makes
one from the run's config and spaces, both backends build their networks from it, export rebuilds the
deployable part from it; JSON only at the file (`to_json`, `from_json`), which keeps the fields' order
as checkpoints have always written them.

A field that a network type does not have is None (absent from the JSON): `discrete` and `log_std_init`
belong to the on-policy actor-critics, `log_std_min`/`log_std_max` to SAC, `n_critics` to TD3 and DDPG,
`action_nvec` to a MultiDiscrete one of theirs, the switches from `dueling` to `v_max` to Rainbow, `rnn` to `enable_critic_lstm` to the recurrent
actor-critics. Which type an algorithm writes is its row's (train.algos); this module names none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rl2edge.errors import CheckpointError
from rl2edge.specs import RNN_KINDS, StateTensor, rnn_state_tensors


@dataclass(frozen=True)
class EncoderKey:
    """One key of a Dict observation as the encoder takes it: a vector key passes through, an image key
    goes through its own Nature-CNN (train.core.encoder_spec)."""

    name: str
    size: int
    image: bool = False
    shape: tuple[int, ...] = ()
    """An image key's shape in the env's layout."""
    channels_last: bool = False
    scale: float = 1.0
    """1/255 for a uint8 frame bounded [0, 255] (SB3's preprocess_obs), else 1."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "size": self.size}
        if self.image:
            out.update(image=True, shape=list(self.shape), channels_last=self.channels_last, scale=self.scale)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EncoderKey:
        if not d.get("image"):
            return cls(str(d["name"]), int(d["size"]))
        return cls(
            str(d["name"]),
            int(d["size"]),
            True,
            tuple(int(x) for x in d["shape"]),
            bool(d["channels_last"]),
            float(d["scale"]),
        )

    @property
    def chw(self) -> tuple[int, int, int]:
        """An image key's (channels, height, width)."""
        if self.channels_last:
            return self.shape[2], self.shape[0], self.shape[1]
        return self.shape[0], self.shape[1], self.shape[2]


@dataclass(frozen=True)
class EncoderSpec:
    """The network's observation encoder: SB3's CombinedExtractor, a Nature-CNN per image key."""

    keys: tuple[EncoderKey, ...]
    cnn_output_dim: int
    type: str = "nature_cnn"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "keys": [k.to_json() for k in self.keys],
            "cnn_output_dim": self.cnn_output_dim,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EncoderSpec:
        if d.get("type") != "nature_cnn":
            raise CheckpointError(f"network encoder type {d.get('type')!r} is not nature_cnn")
        return cls(tuple(EncoderKey.from_json(k) for k in d["keys"]), int(d["cnn_output_dim"]))


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """checkpoint.json's `network`. The field order is the JSON's."""

    type: str
    obs_dim: int
    """The width of the flat observation the network takes (K observations for a frame stack of K)."""
    act_dim: int
    """The network's output width: n logits or Q-values (Discrete), one mean per dimension (Box)."""
    discrete: bool | None = None
    action_nvec: tuple[int, ...] | None = None
    """A MultiDiscrete/MultiBinary action's choices per component: the output is one categorical head per
    component, their logits concatenated in order (written only then; a Discrete head has none)."""
    net_arch: tuple[int, ...]
    activation: str
    log_std_init: float | None = None
    log_std_min: float | None = None
    log_std_max: float | None = None
    n_critics: int | None = None
    dueling: bool | None = None
    noisy: bool | None = None
    noisy_sigma0: float | None = None
    distributional: bool | None = None
    n_atoms: int | None = None
    v_min: float | None = None
    v_max: float | None = None
    rnn: str | None = None
    """The recurrent cell (lstm or gru); checkpoints written before the GRU have none and mean an LSTM."""
    lstm_biases: int | None = None
    """Biases per recurrent layer: 2 (b_ih and b_hh, torch's); TF checkpoints before had 1."""
    lstm_hidden_size: int | None = None
    n_lstm_layers: int | None = None
    shared_lstm: bool | None = None
    enable_critic_lstm: bool | None = None
    encoder: EncoderSpec | None = None
    frame_stack: int = 1
    """K > 1: the network takes the last K observations, oldest first (written only then)."""

    def __post_init__(self) -> None:
        # one check for every reader: the numpy rollout, both backends and both export routes build the
        # same cell or none of them does
        if self.rnn is not None and self.rnn not in RNN_KINDS:
            raise CheckpointError(
                f"network rnn {self.rnn!r} is not one of {', '.join(RNN_KINDS)}: the checkpoint was edited or "
                "written by another tool"
            )

    def required(self, name: str) -> Any:
        """A field of this network's type (its row's network writes it); a CheckpointError where it is missing."""
        value = getattr(self, name)
        if value is None:
            raise CheckpointError(
                f"checkpoint network {self.type!r} has no {name}: the checkpoint was edited or written by "
                "another tool"
            )
        return value

    @property
    def is_discrete(self) -> bool:
        """An actor-critic's action head is discrete (`discrete`, which only on-policy networks record)."""
        return bool(self.required("discrete"))

    @property
    def recurrent(self) -> bool:
        return self.lstm_hidden_size is not None

    @property
    def rnn_kind(self) -> str:
        """The recurrent cell: lstm or gru."""
        return self.rnn or "lstm"

    @property
    def state(self) -> list[StateTensor]:
        """The recurrent actor's state tensors, as the exported graph carries them; none for a stateless
        network (a frame stack's state is the artifact's, made at export: it is not the network's)."""
        if not self.recurrent:
            return []
        return rnn_state_tensors(
            self.rnn_kind, self.required("n_lstm_layers"), self.required("lstm_hidden_size")
        )

    def replace(self, **fields: Any) -> NetworkSpec:
        return dataclasses.replace(self, **fields)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "frame_stack" and value == 1):
                continue
            if f.name in ("net_arch", "action_nvec"):
                value = list(value)
            elif f.name == "encoder":
                value = value.to_json()
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, d: Any) -> NetworkSpec:
        """checkpoint.json's `network`; a missing, unknown or mistyped field is a CheckpointError."""
        if not isinstance(d, dict):
            raise CheckpointError(f"checkpoint network must be a JSON object, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise CheckpointError(
                f"checkpoint network has fields {unknown} that rl2edge does not write: the checkpoint was "
                "edited or written by another tool"
            )
        try:
            fields: dict[str, Any] = dict(d)
            fields["net_arch"] = tuple(int(w) for w in d["net_arch"])
            if d.get("action_nvec") is not None:
                fields["action_nvec"] = tuple(int(n) for n in d["action_nvec"])
            for name in ("obs_dim", "act_dim"):
                fields[name] = int(d[name])
            if d.get("encoder") is not None and not isinstance(d["encoder"], EncoderSpec):
                fields["encoder"] = EncoderSpec.from_json(d["encoder"])
            return cls(**fields)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint network is incomplete or mistyped ({exc!r})") from None
