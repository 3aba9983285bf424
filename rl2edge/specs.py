"""The shared types of every package, numpy only: what a policy's observation and action are (as the
checkpoint and the manifest write them), the action transform between the network and the env, and the
exploration-noise spec with its parser. train, export, runtime and plc_bridge speak through these.

Two sizes of an action are easy to confuse and have two names here: `ActionSpec.size` is the action's
length as the env and the PLC take it (1 for a Discrete index), `ActionSpec.output_width` the width of
the network's output (n logits or Q-values for Discrete). The checkpoint's `network.act_dim` is the
latter, a file-format name that stays.

Action transform. Box: env_action = center + clip(a, -1, 1) * half_range, in float32. Discrete:
env_action = index + start. One formula, used in training, evaluation, and (as constants folded into
the graph) deployment.

Exploration noise, in [-1, 1]-scaled action units, with eps ~ N(0, 1):

    gaussian:  a = clip(mu + sigma * eps, -1, 1)
    ou:        x' = x - theta * x * dt + sigma * sqrt(dt) * eps;  a = clip(mu + x', -1, 1)
    policy:    a = the policy's own distribution (SAC: tanh(mean + std * eps); PPO: mean + std * eps)

written as on the command line: `gaussian:sigma=0.1`, `ou:theta=0.15,sigma=0.2,dt=0.01`, `policy`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError, ObservationError

KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED_KEYS = frozenset({"obs", "action", "noise", "ou_state", "ou_state_out"})
"""Names the graph gives its other tensors: a Dict key may not take them."""


@dataclass(frozen=True)
class ObservationKey:
    """One key of a Dict observation: a Box sensor group (lidar, imu, ...), as the env declares it."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    low: tuple[float | None, ...] = ()
    high: tuple[float | None, ...] = ()
    unit: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ObservationKey:
        return cls(
            str(d["name"]),
            tuple(int(x) for x in d["shape"]),
            str(d.get("dtype", "float32")),
            tuple(d.get("low") or ()),
            tuple(d.get("high") or ()),
            d.get("unit"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": list(self.low),
            "high": list(self.high),
            "unit": self.unit,
        }

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def is_image(self) -> bool:
        """A 3-D key: a camera frame (HWC or CHW). It travels flattened, row-major in its own shape, like
        every key; the graph reshapes it for its CNN."""
        return len(self.shape) == 3

    @property
    def frame_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes a frame of this key is taken in, all the same values in the same order: its own, flat,
        and without a channel axis of 1 (a grayscale frame). A transposed frame of the same size is not
        among them: its pixels would be scrambled."""
        shapes = [self.shape, (self.size,)]
        if self.shape[-1] == 1:
            shapes.append(self.shape[:-1])
        if self.shape[0] == 1:
            shapes.append(self.shape[1:])
        return tuple(shapes)


def check_key_name(name: str) -> None:
    """A key becomes a tensor name in the ONNX and TFLite files and a node map entry: an identifier."""
    if not isinstance(name, str) or not KEY_NAME.fullmatch(name):
        raise ConfigError(
            f"Dict observation key {name!r} is not a name the graph can carry: use letters, digits and "
            "underscores, starting with a letter (at most 64 characters)"
        )
    if name in RESERVED_KEYS:
        raise ConfigError(
            f"Dict observation key {name!r} is the name of one of the graph's own tensors "
            f"({', '.join(sorted(RESERVED_KEYS))}); rename it"
        )


@dataclass(frozen=True)
class ObservationSpec:
    """A Box observation, or a Dict of Box keys (`keys`), which the policy sees as their values
    concatenated in the declared order: `shape`, `low` and `high` then describe that concatenation, so
    that the normalization, the network and the serve loop's guard work on one flat vector, while the
    artifact keeps one named input per key and the node map one node (or scalar list) per key."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: tuple[float | None, ...] = ()
    high: tuple[float | None, ...] = ()
    layout: str = "flat"
    """flat, HWC or CHW (image observations)."""
    keys: tuple[ObservationKey, ...] = ()
    """Dict observations: the keys in the space's order (the concatenation's)."""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ObservationSpec:
        return cls(
            tuple(int(x) for x in d["shape"]),
            str(d.get("dtype", "float32")),
            tuple(d.get("low") or ()),
            tuple(d.get("high") or ()),
            str(d.get("layout", "flat")),
            tuple(ObservationKey.from_json(k) for k in d.get("keys") or ()),
        )

    @classmethod
    def of_keys(cls, keys: list[ObservationKey]) -> ObservationSpec:
        """The Dict observation of `keys`, in that order."""
        for k in keys:
            check_key_name(k.name)
        names = [k.name for k in keys]
        if len(set(names)) != len(names) or not keys:
            raise ConfigError(f"Dict observation keys {names} must be distinct, and at least one")
        low: list[float | None] = []
        high: list[float | None] = []
        for k in keys:
            unbounded = [None] * k.size
            low += list(k.low) or unbounded
            high += list(k.high) or unbounded
        return cls((sum(k.size for k in keys),), "float32", tuple(low), tuple(high), "flat", tuple(keys))

    def to_json(self) -> dict[str, Any]:
        """As checkpoint.json and the manifest have always written it; a Dict adds its keys, and its
        shape/low/high are those of the concatenation."""
        out: dict[str, Any] = {
            "type": "dict" if self.keys else "box",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": list(self.low),
            "high": list(self.high),
            "layout": self.layout,
        }
        if self.keys:
            out["keys"] = [k.to_json() for k in self.keys]
        return out

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def is_dict(self) -> bool:
        return bool(self.keys)

    @property
    def is_image(self) -> bool:
        """An image Box outside a Dict (HWC or CHW): a camera alone."""
        return not self.keys and self.layout != "flat"

    @property
    def is_matrix(self) -> bool:
        """A Box of two or more axes that is not an image (highway-env's (5, 5) Kinematics): the graph
        takes it in its shape and flattens it row-major for the MLP; a PLC gives it as one flat array."""
        return not self.keys and self.layout == "flat" and len(self.shape) > 1

    @property
    def key_slices(self) -> list[tuple[str, slice]]:
        """Each key's place in the concatenation."""
        out, start = [], 0
        for k in self.keys:
            out.append((k.name, slice(start, start + k.size)))
            start += k.size
        return out

    def flatten(self, obs: Any) -> np.ndarray:
        """A Dict observation (a mapping of key -> values) as the policy's one float32 vector, keys in the
        declared order; anything else as it is. A missing or extra key, or a key of the wrong number of
        values, is an ObservationError that names it."""
        if not self.keys or not isinstance(obs, Mapping):
            return np.asarray(obs)
        names = [k.name for k in self.keys]
        missing = [n for n in names if n not in obs]
        extra = sorted(str(n) for n in obs if n not in names)
        if missing or extra:
            what = "; ".join(
                part
                for part in (
                    f"missing key(s) {missing}" if missing else "",
                    f"unexpected key(s) {extra}" if extra else "",
                )
                if part
            )
            raise ObservationError(f"Dict observation: {what}; the artifact takes {names}")
        parts = []
        for k in self.keys:
            v = np.asarray(obs[k.name])
            if k.is_image and v.shape not in k.frame_shapes:
                raise ObservationError(
                    f"Dict observation key {k.name!r} is a {k.shape} frame; got shape {v.shape}. Give it in "
                    f"that shape, or flat in that order ({k.size} values, as a PLC array holds it)"
                )
            if v.size != k.size:
                raise ObservationError(
                    f"Dict observation key {k.name!r} has {v.size} values (shape {v.shape}); "
                    f"the artifact takes {k.size} (shape {k.shape})"
                )
            parts.append(v.reshape(-1))
        return np.concatenate(parts)

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """The inverse of `flatten`: each key's values (views of `flat`), in the key's shape."""
        flat = np.asarray(flat).reshape(-1)
        return {
            k.name: flat[s].reshape(k.shape) for k, (_, s) in zip(self.keys, self.key_slices, strict=True)
        }

    @property
    def bounds(self) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
        """(low, high) with one entry per value; None where a side is unbounded (a bound left out, or [])."""
        unbounded = (None,) * self.size
        return self.low or unbounded, self.high or unbounded


@dataclass(frozen=True)
class ActionSpec:
    kind: str
    """discrete, multi_discrete or box"""
    n: int = 0
    start: int = 0
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    low: tuple[float, ...] = ()
    high: tuple[float, ...] = ()
    nvec: tuple[int, ...] = ()
    """multi_discrete: each component's number of choices (valves, selector switches)"""
    starts: tuple[int, ...] = ()
    """multi_discrete: each component's first index (Gymnasium's MultiDiscrete `start`; 0 for MultiBinary)"""
    binary: bool = False
    """multi_discrete from a MultiBinary space (every component 0 or 1)"""

    @classmethod
    def multi(cls, nvec: Any, starts: Any = None, binary: bool = False) -> ActionSpec:
        nv = tuple(int(v) for v in nvec)
        st = tuple(int(v) for v in (starts if starts is not None else [0] * len(nv)))
        if not nv or len(st) != len(nv) or min(nv) < 2:
            raise ValueError(f"a multi_discrete action needs 2 or more choices per component, got nvec {nv}")
        return cls("multi_discrete", nvec=nv, starts=st, binary=binary)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ActionSpec:
        if d["type"] == "discrete":
            return cls("discrete", n=int(d["n"]), start=int(d.get("start", 0)))
        if d["type"] == "multi_discrete":
            return cls.multi(d["nvec"], d.get("start"), bool(d.get("binary", False)))
        return cls(
            "box",
            shape=tuple(int(x) for x in d.get("shape", [len(d["low"])])),
            dtype=str(d.get("dtype", "float32")),
            low=tuple(d["low"]),
            high=tuple(d["high"]),
        )

    def to_json(self) -> dict[str, Any]:
        if self.discrete:
            return {"type": "discrete", "n": self.n, "start": self.start}
        if self.multi_discrete:
            return {
                "type": "multi_discrete",
                "nvec": list(self.nvec),
                "start": list(self.starts),
                "binary": self.binary,
            }
        return {
            "type": "box",
            "shape": list(self.shape),
            "dtype": self.dtype,
            "low": list(self.low),
            "high": list(self.high),
        }

    @property
    def discrete(self) -> bool:
        """One Discrete index (a scalar action)."""
        return self.kind == "discrete"

    @property
    def multi_discrete(self) -> bool:
        """Several discrete components (MultiDiscrete or MultiBinary): one index per component."""
        return self.kind == "multi_discrete"

    @property
    def categorical(self) -> bool:
        """Integer actions from categorical heads (Discrete or MultiDiscrete): argmax per component."""
        return self.kind in ("discrete", "multi_discrete")

    @property
    def space_name(self) -> str:
        """Gymnasium's name for the action space, as messages name it."""
        if self.multi_discrete:
            return "MultiBinary" if self.binary else "MultiDiscrete"
        return "Discrete" if self.discrete else "Box"

    @property
    def heads(self) -> tuple[int, ...]:
        """A categorical action's logits per component: (n,) for Discrete, nvec for MultiDiscrete."""
        return (self.n,) if self.discrete else self.nvec

    @property
    def size(self) -> int:
        """The action's length as the env and the PLC take it: 1 for a Discrete index, one per component."""
        if self.discrete:
            return 1
        return len(self.nvec) if self.multi_discrete else int(np.prod(self.shape))

    @property
    def index_range(self) -> tuple[int, int]:
        """Discrete: the first and the last action index the env takes (start .. start + n - 1)."""
        return self.start, self.start + self.n - 1

    @property
    def index_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Categorical: each component's first and last index as int64 arrays of `size` values."""
        if self.discrete:
            return np.array([self.start], np.int64), np.array([self.start + self.n - 1], np.int64)
        lo = np.asarray(self.starts, np.int64)
        return lo, lo + np.asarray(self.nvec, np.int64) - 1

    @property
    def output_width(self) -> int:
        """The network's output width: n logits or Q-values for Discrete, the sum of nvec for
        MultiDiscrete (each component's logits, in order), one per dimension for Box."""
        if self.categorical:
            return int(sum(self.heads))
        return self.size


class ActionTransform:
    def __init__(self, spec: ActionSpec):
        self.discrete = spec.categorical
        # a multi-discrete action's choices per component (its starts: `start`); None otherwise
        self.nvec = spec.nvec if spec.multi_discrete else None
        if self.discrete:
            self.start = spec.start if spec.discrete else np.asarray(spec.starts, np.int64)
        else:
            low = np.asarray(spec.low, np.float64)
            high = np.asarray(spec.high, np.float64)
            self.center = ((high + low) / 2).astype(np.float32)
            self.half_range = ((high - low) / 2).astype(np.float32)

    def to_env(self, action: np.ndarray) -> np.ndarray:
        if self.discrete:
            return np.asarray(action, np.int64) + self.start
        a = np.clip(np.asarray(action, np.float32), np.float32(-1), np.float32(1))
        return (self.center + a * self.half_range).astype(np.float32)


Real = float | np.floating[Any]
"""A Python float or a numpy one (training's OU noise keeps its parameters as float32)."""

KINDS = ("gaussian", "ou", "policy")
_PARAMS = {"gaussian": {"sigma": 0.1}, "ou": {"theta": 0.15, "sigma": 0.2, "dt": 1e-2}, "policy": {}}


@dataclass(frozen=True)
class NoiseSpec:
    kind: str
    sigma: float = 0.0
    theta: float = 0.0
    dt: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return {k: v for k, v in out.items() if k == "kind" or k in _PARAMS[self.kind]}

    def __str__(self) -> str:
        params = ",".join(f"{k}={getattr(self, k):g}" for k in _PARAMS[self.kind])
        return f"{self.kind}:{params}" if params else self.kind


def parse_noise(text: str) -> NoiseSpec:
    """'gaussian:sigma=0.1' -> NoiseSpec; a clear ConfigError for anything else."""
    kind, _, rest = text.strip().partition(":")
    if kind not in KINDS:
        raise ConfigError(
            f"--noise {text!r}: unknown kind {kind!r}; use gaussian:sigma=S, ou:theta=T,sigma=S[,dt=D] or policy"
        )
    params = dict(_PARAMS[kind])
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise ConfigError(
                f"--noise {text!r}: {kind} takes {', '.join(params) or 'no parameters'}, got {item!r}"
            )
        try:
            params[key] = float(value)
        except ValueError:
            raise ConfigError(f"--noise {text!r}: {key} must be a number, got {value!r}") from None
        if not math.isfinite(params[key]) or params[key] < 0:
            raise ConfigError(f"--noise {text!r}: {key} must be a finite number >= 0")
    if kind == "ou" and params["theta"] * params["dt"] >= 2:
        raise ConfigError(f"--noise {text!r}: theta * dt must be below 2, or the OU process diverges")
    return NoiseSpec(kind, **params)


def ou_constants(theta: Real, sigma: Real, dt: Real) -> tuple[np.float32, np.float32]:
    """(theta * dt, sigma * sqrt(dt)) as the float32 constants of the step below, here and in the graph."""
    return np.float32(theta * dt), np.float32(sigma * math.sqrt(dt))


def ou_step(x: np.ndarray, eps: np.ndarray, theta: Real, sigma: Real, dt: Real) -> np.ndarray:
    """One OU step in float32: x - (theta dt) x + (sigma sqrt(dt)) eps, the graph's formula."""
    decay, scale = ou_constants(theta, sigma, dt)
    return (x - decay * x + scale * eps).astype(np.float32)


LSTM_CELL = (
    "LSTM, one step per call, per layer: h, c = h * (1 - episode_start), c * (1 - episode_start); "
    "gate_k = [x, h] @ W_k + b_k for k in i, f, g, o; c' = sigmoid(f) * c + sigmoid(i) * tanh(g); "
    "h' = sigmoid(o) * tanh(c'); the top layer's h' goes to the actor's MLP"
)


GRU_CELL = (
    "GRU, one step per call, per layer: h = h * (1 - episode_start); r = sigmoid([x, h] @ W_r + b_r), "
    "z = sigmoid([x, h] @ W_z + b_z), n = tanh(x @ W_in + b_in + r * (h @ W_hn + b_hn)); "
    "h' = n + z * (h - n) (torch's (1 - z) * n + z * h); the top layer's h' goes to the actor's MLP"
)

RNN_KINDS = ("lstm", "gru")
"""The recurrent cells a recurrent policy may have (`rnn_type`); the checkpoint's network says which as "rnn"."""


def rnn_cell_text(kind: str) -> str:
    """The manifest's description of a recurrent actor's cell."""
    return {"lstm": LSTM_CELL, "gru": GRU_CELL}[kind]


@dataclass(frozen=True)
class StateTensor:
    """One tensor a stateful policy carries from one call to the next: a recurrent cell's h or c per layer,
    a frame stack's older observations, a rate limit's previous action, OU noise's process. The one type
    of state from training's rollout to the runtime's Policy: the export graph takes it as the float32
    input `name`, computes its next value as the output `output`, and multiplies it by (1 - episode_start)
    before use; the manifest's `state.tensors` lists it (`to_json`), and the runtime feeds it, starting
    from `initial` after every reset."""

    name: str
    shape: tuple[int, ...]
    """Per call: [1, size] in the graph and the manifest; a training rollout holds one row per env."""
    role: str
    dtype: str = "float32"
    initial: float = 0.0
    """The reset value: every element is this after a reset (the contract's is 0)."""
    output: str = ""
    """The graph output that feeds this input on the next call; `name` + "_out" unless given."""

    def __post_init__(self) -> None:
        if not self.output:
            object.__setattr__(self, "output", f"{self.name}_out")

    @classmethod
    def row(cls, name: str, size: int, role: str) -> StateTensor:
        """A [1, size] float32 state tensor that starts at zero: every state rl2edge's graphs carry."""
        return cls(name, (1, int(size)), role)

    @property
    def size(self) -> int:
        """Values per call (per env in a training rollout)."""
        return int(np.prod(self.shape[1:]))

    def initial_value(self, rows: int | None = None) -> np.ndarray:
        """The reset value: of `shape`, or for `rows` calls side by side (envs in a rollout) [rows, *shape[1:]]."""
        shape = self.shape if rows is None else (rows, *self.shape[1:])
        return np.full(shape, self.initial, np.dtype(self.dtype))

    def to_json(self) -> dict[str, Any]:
        """The manifest's entry under `state.tensors`."""
        return {
            "name": self.name,
            "input": self.name,
            "output": self.output,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "initial": self.initial,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StateTensor:
        """A manifest entry (runtime.manifest_schema has checked its types)."""
        return cls(
            str(d["input"]),
            tuple(int(x) for x in d["shape"]),
            str(d.get("role", "")),
            str(d.get("dtype", "float32")),
            float(d.get("initial", 0.0)),
            str(d["output"]),
        )


def rnn_state_tensors(kind: str, layers: int, hidden: int) -> list[StateTensor]:
    """A recurrent actor's state tensors in the graph's order: an LSTM's h and c per layer (`lstm_h_0`,
    `lstm_c_0`, ...), a GRU's h per layer (`gru_h_0`, ...). Both export routes name them so, and training's
    numpy cell holds one [layers, envs, hidden] array per part of a layer's state (RNN_PARTS)."""
    if kind not in RNN_PARTS:
        raise ValueError(f"no recurrent cell {kind!r}")
    return [
        StateTensor.row(f"{kind}_{part}_{k}", hidden, f"actor {kind.upper()} layer {k} {role} state")
        for k in range(layers)
        for part, role in RNN_PARTS[kind]
    ]


RNN_PARTS = {"lstm": (("h", "hidden"), ("c", "cell")), "gru": (("h", "hidden"),)}
"""The parts of one layer's state, in the graph's order, per recurrent cell."""


FRAMES = "frames"
FRAME_STACK_CELL = (
    "frame stack of K: x = concat(frames * (1 - episode_start), obs), the K-1 previous observations oldest "
    "first and this one last (zeros before an episode's first: SB3's VecFrameStack); the policy runs on x; "
    "frames_out = x without its oldest observation"
)


def frame_stack_state(dim: int, k: int) -> StateTensor:
    """A frame stack's state: the K-1 previous observations of `dim` values, oldest first."""
    return StateTensor.row(FRAMES, (k - 1) * dim, f"the {k - 1} previous observations, oldest first")
