"""The TF route: a source's deployable graph as a tf.Module (normalization, the actor, its state, the head,
folded noise; the same float32 formulas as the torch route's export.deployable, export.stateful and
export.folded_noise), saved as a SavedModel that the same TFLiteConverter step turns into every
quantization mode. Never imports torch.

The graph is built in named steps, as the torch route's modules are:
1. `GraphConstants.of(parts)`: the source's numbers frozen as constants (statistics, layers, cells);
2. `TFDeployable.normalized` -> `features` -> `pre_head`: the stateless policy up to the head's input;
3. `cell_step` (a recurrent actor, one step per call) or `stacked_step` (a frame stack): the state;
4. `head_of`: argmax, or squash and unscale to the action bounds;
5. `noisy`, `distribution`: folded exploration noise (export.folded_noise's formulas, op for op);
then `TFDeployable.__init__` traces the signatures a SavedModel serves and export runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from rl2edge.errors import CheckpointError
from rl2edge.export.graph_spec import EPISODE_START, NOISE_INPUT, STATE_INPUT, STATE_OUTPUT
from rl2edge.export.source import GraphSource
from rl2edge.specs import (
    FRAME_STACK_CELL,
    FRAMES,
    ActionSpec,
    ActionTransform,
    NoiseSpec,
    StateTensor,
    frame_stack_state,
    ou_constants,
    rnn_cell_text,
    rnn_state_tensors,
)
from rl2edge.train.core.normalization import RunningNormalizer

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


@dataclass
class GraphParts:
    """What the TF deployable graph is built from: the agent's parts (frozen actor layers and, for `policy`
    noise, the policy's log std), the normalizer, the action and the head."""

    net: DeployParts
    norm: RunningNormalizer
    action: ActionSpec
    obs_dim: int
    head: str
    obs_keys: tuple[tuple[str, int], ...] = ()
    """A Dict observation's keys and sizes, in order: the served graph takes one input per key."""
    frame_stack: int = 1
    """K > 1: the network takes the last K observations (`obs_dim` is K times one's); the served graph takes
    one and keeps the K-1 previous ones as its state (rl2edge.specs.FRAME_STACK_CELL)."""
    matrix_shape: tuple[int, ...] = ()
    """A matrix observation's shape (ObservationSpec.is_matrix): the graph takes it so, and flattens it
    row-major before the normalization, as the torch route's DeployablePolicy. An image Box of rl2edge's
    own is taken flat (`obs_dim` values in the env's order), as a Dict's camera key."""

    @property
    def input_shape(self) -> list[int]:
        """One observation as the graph's `obs` input takes it."""
        return list(self.matrix_shape) or [self.obs_dim]

    @property
    def has_distribution(self) -> bool:
        return self.net.log_std_dense is not None or self.net.log_std_const is not None


def cell_gates(kind: str, layer: tuple[np.ndarray, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    """One recurrent layer (train.core.rnn_cells' layout) as the exported cell's (kernel, bias) per gate:
    an LSTM's i, f, g, o each on [x, h] with b_ih + b_hh; a GRU's r and z on [x, h] with b_ih + b_hh, then
    n's part on x and its part on h apart (the reset gate multiplies the latter, b_hn included)."""
    k_ih, k_hh, b_ih, b_hh = layer
    h = k_hh.shape[0]
    cols = lambda g: slice(g * h, (g + 1) * h)  # noqa: E731
    joint = lambda g: (np.concatenate([k_ih[:, cols(g)], k_hh[:, cols(g)]]), b_ih[cols(g)] + b_hh[cols(g)])  # noqa: E731
    if kind == "lstm":
        return [joint(g) for g in range(4)]
    if kind == "gru":
        return [joint(0), joint(1), (k_ih[:, cols(2)], b_ih[cols(2)]), (k_hh[:, cols(2)], b_hh[cols(2)])]
    raise ValueError(f"no recurrent cell {kind!r}")


Layers = Callable[[tf.Tensor], tf.Tensor]


@dataclass(frozen=True)
class GraphConstants:
    """Step 1: the source's numbers as the graph's constants. A plain object, so that the tf.Module does not
    track it (its layers' weights are constants inside the traced functions, never variables)."""

    mean: np.ndarray
    inv_std: np.ndarray
    clip: float | None
    bounds: np.ndarray | None
    """Per-element clip bounds where some elements are left raw (image keys: pixels are never clipped)."""
    transform: ActionTransform
    actor: Layers
    latent: Layers | None
    """With a log std on the latent (a squashed Gaussian): the actor's first layers, then `mu`."""
    mu: Layers | None
    log_std: Layers | None
    kind: str
    cells: list[list[tuple[tf.Tensor, tf.Tensor]]]
    """A recurrent actor's layers, one (kernel, bias) per gate (`cell_gates`); empty without one."""
    states: list[StateTensor]
    """The recurrent actor's state tensors (rl2edge.specs.rnn_state_tensors)."""

    @classmethod
    def of(cls, parts: GraphParts) -> GraphConstants:
        from rl2edge.train.tf_backend.nets import frozen_dense

        net = parts.net
        mean, inv_std = (c.reshape(-1) for c in parts.norm.constants())
        latent = frozen_dense(net.dense[: net.latent_depth]) if net.log_std_dense is not None else None
        mu = frozen_dense(net.dense[net.latent_depth :]) if latent is not None else None
        actor = net.actor_fn if net.actor_fn is not None else frozen_dense(net.dense)
        log_std = frozen_dense([net.log_std_dense]) if net.log_std_dense is not None else None
        kind, layers = net.rnn if net.rnn is not None else ("lstm", [])
        cells = [[(tf.constant(w), tf.constant(b)) for w, b in cell_gates(kind, layer)] for layer in layers]
        return cls(
            mean,
            inv_std,
            float(parts.norm.clip) if parts.norm.enabled else None,
            parts.norm.clip_bounds(),
            ActionTransform(parts.action),
            actor,
            latent,
            mu,
            log_std,
            kind,
            cells,
            rnn_state_tensors(kind, len(layers), layers[0][1].shape[0]) if layers else [],
        )


class TFDeployable(tf.Module):
    """The deployable graph. `serve` is the SavedModel's signature (the observation, or one input per Dict
    key, then episode_start and the states, or the noise inputs); `batch`, `pre_head`, `step`, `noisy` and
    `distribution` are what export runs the source with."""

    def __init__(self, parts: GraphParts, noise: NoiseSpec | None = None) -> None:
        super().__init__(name="rl2edge_policy")
        self._parts, self._noise = parts, noise
        self._c = GraphConstants.of(parts)
        obs_dim, act_dim, k = parts.obs_dim, parts.action.size, parts.frame_stack
        obs_spec = lambda n, name=None: tf.TensorSpec([n, *parts.input_shape], tf.float32, name=name)  # noqa: E731
        act_spec = lambda n, name=None: tf.TensorSpec([n, act_dim], tf.float32, name=name)  # noqa: E731
        start_spec = lambda n: tf.TensorSpec([n, 1], tf.float32, name=EPISODE_START if n == 1 else None)  # noqa: E731
        if k > 1:
            frame_dim = obs_dim // k
            signature = [
                tf.TensorSpec([1, frame_dim], tf.float32, name="obs"),
                start_spec(1),
                tf.TensorSpec([1, (k - 1) * frame_dim], tf.float32, name=FRAMES),
            ]
            self.serve = tf.function(self.stacked, input_signature=signature)
            self.step = tf.function(self.stacked_step, input_signature=signature)
            return
        if self._c.cells:
            states = [tf.TensorSpec(list(t.shape), tf.float32, name=t.name) for t in self._c.states]
            extra = [start_spec(1), *states]
            self.serve = self._served(self.stateful, extra)  # one input per key for a Dict
            self.step = tf.function(self.full_step, input_signature=[obs_spec(1, "obs"), *extra])
            return
        self.batch = tf.function(self.forward, input_signature=[obs_spec(None)])
        self.pre_head = tf.function(self.actor_out, input_signature=[obs_spec(None)])
        if noise is None:
            self.serve = self._served(self.forward, [])
            return
        extra = [act_spec(1, NOISE_INPUT)]
        batch_signature = [obs_spec(None), act_spec(None)]
        if noise.kind == "ou":  # the state contract: episode_start, then the state
            extra += [start_spec(1), act_spec(1, STATE_INPUT)]
            batch_signature += [start_spec(None), act_spec(None)]
        self.serve = self._served(self.noisy, extra)
        self.noisy_batch = tf.function(self.noisy, input_signature=batch_signature)
        if noise.kind == "policy":  # only a policy with a distribution has one to trace
            self.distribution = tf.function(self.policy_distribution, input_signature=[obs_spec(None)])

    def _served(self, fn: Callable[..., Any], extra: list[tf.TensorSpec]) -> Any:
        """The SavedModel's signature: `obs`, or one input per Dict key concatenated in order, then the
        `extra` inputs."""
        if not self._parts.obs_keys:
            return tf.function(
                fn,
                input_signature=[
                    tf.TensorSpec([1, *self._parts.input_shape], tf.float32, name="obs"),
                    *extra,
                ],
            )
        n_keys = len(self._parts.obs_keys)

        def keyed(*args: tf.Tensor) -> Any:
            return fn(tf.concat(list(args[:n_keys]), axis=-1), *args[n_keys:])

        keys = [tf.TensorSpec([1, n], tf.float32, name=k) for k, n in self._parts.obs_keys]
        return tf.function(keyed, input_signature=[*keys, *extra])

    # ---- step 2: the stateless policy up to the head's input
    def normalized(self, obs: tf.Tensor) -> tf.Tensor:
        c = self._c
        if self._parts.matrix_shape:
            obs = tf.reshape(obs, [-1, self._parts.obs_dim])
        x = (obs - tf.constant(c.mean)) * tf.constant(c.inv_std)
        if c.bounds is not None:
            limit = tf.constant(c.bounds.reshape(-1))
            return tf.minimum(tf.maximum(x, -limit), limit)
        return tf.clip_by_value(x, -c.clip, c.clip) if c.clip is not None else x

    def features(self, obs: tf.Tensor) -> tf.Tensor:
        """What the actor's layers take: the normalized observation, or its encoder's features."""
        x = self.normalized(obs)
        encoder = self._parts.net.encoder_fn
        return encoder(x) if encoder is not None else x

    def actor_out(self, obs: tf.Tensor) -> tf.Tensor:
        return self._c.actor(self.features(obs))

    # ---- step 3: the state
    def cell_step(self, obs: tf.Tensor, episode_start: tf.Tensor, *state: tf.Tensor) -> dict[str, tf.Tensor]:
        """The recurrent cell (a FULLY_CONNECTED per gate, as the torch route's LSTMCellActor and
        GRUCellActor), then the actor's layers: the output before the head and the next states, the state
        zeroed where episode_start is 1."""
        c = self._c
        keep = 1.0 - episode_start
        x, new = self.features(obs), []
        for k, gates in enumerate(c.cells):
            if c.kind == "gru":
                h = state[k] * keep
                xh = tf.concat([x, h], axis=-1)
                (w_r, b_r), (w_z, b_z), (w_nx, b_nx), (w_nh, b_nh) = gates
                r, z = tf.sigmoid(tf.matmul(xh, w_r) + b_r), tf.sigmoid(tf.matmul(xh, w_z) + b_z)
                n = tf.tanh(tf.matmul(x, w_nx) + b_nx + r * (tf.matmul(h, w_nh) + b_nh))
                x = n + z * (h - n)
                new.append(x)
                continue
            h, cell = state[2 * k] * keep, state[2 * k + 1] * keep
            xh = tf.concat([x, h], axis=-1)
            i, f, g, o = (tf.matmul(xh, kernel) + b for kernel, b in gates)
            cell = tf.sigmoid(f) * cell + tf.sigmoid(i) * tf.tanh(g)
            x = tf.sigmoid(o) * tf.tanh(cell)
            new += [x, cell]
        return {"out": c.actor(x), **{t.output: v for t, v in zip(c.states, new, strict=True)}}

    def stacked_step(
        self, obs: tf.Tensor, episode_start: tf.Tensor, frames: tf.Tensor
    ) -> dict[str, tf.Tensor]:
        """A frame stack: the K-1 previous observations (zeroed at an episode's start), then this one."""
        frame_dim = self._parts.obs_dim // self._parts.frame_stack
        stacked = tf.concat([frames * (1.0 - episode_start), obs], axis=-1)
        return {"out": self.actor_out(stacked), f"{FRAMES}_out": stacked[:, frame_dim:]}

    # ---- step 4: the head
    def head_of(self, out: tf.Tensor) -> dict[str, tf.Tensor]:
        transform = self._c.transform
        if self._parts.head == "clip":  # values in action units, held to the bounds (min/max, as ONNX's)
            low, high = (np.asarray(b, np.float32) for b in (self._parts.action.low, self._parts.action.high))
            return {"action": tf.maximum(tf.minimum(out, tf.constant(high)), tf.constant(low))}
        action_spec = self._parts.action
        if action_spec.multi_discrete:  # one index per component: the argmax of its slice, plus its start
            firsts = np.concatenate([[0], np.cumsum(action_spec.nvec)[:-1]])  # slices: see export.deployable
            action = tf.stack(
                [
                    tf.argmax(out[:, a : a + n], axis=-1)
                    for a, n in zip(firsts, action_spec.nvec, strict=True)
                ],
                axis=-1,
            )
            starts = np.asarray(action_spec.starts, np.int64)
            return {"action": action + tf.constant(starts) if starts.any() else action}
        if transform.discrete:
            action = tf.argmax(out, axis=-1)
            return {"action": action + transform.start if transform.start else action}
        return {"action": _unscale(_squash(self._parts.head, out), transform)}

    # ---- the graphs export traces
    def forward(self, obs: tf.Tensor) -> dict[str, tf.Tensor]:
        return self.head_of(self.actor_out(obs))

    def stacked(self, obs: tf.Tensor, episode_start: tf.Tensor, frames: tf.Tensor) -> dict[str, tf.Tensor]:
        step = self.stacked_step(obs, episode_start, frames)
        out = step.pop("out")
        return {**self.head_of(out), **step}

    def full_step(self, obs: tf.Tensor, episode_start: tf.Tensor, *state: tf.Tensor) -> dict[str, tf.Tensor]:
        """The source's step on the concatenated observation: the output before the head too."""
        step = self.cell_step(obs, episode_start, *state)
        return {**self.head_of(step["out"]), **step}

    def stateful(self, obs: tf.Tensor, episode_start: tf.Tensor, *state: tf.Tensor) -> dict[str, tf.Tensor]:
        step = self.cell_step(obs, episode_start, *state)
        out = step.pop("out")
        return {**self.head_of(out), **step}

    # ---- step 5: folded noise
    def policy_distribution(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        c, net = self._c, self._parts.net
        x = self.features(obs)
        if c.latent is not None:  # a log std on the latent
            assert c.mu is not None and c.log_std is not None
            h = c.latent(x)
            lo, hi = net.log_std_bounds
            return c.mu(h), tf.clip_by_value(c.log_std(h), lo, hi)
        m = c.actor(x)
        return m, tf.broadcast_to(tf.constant(net.log_std_const), tf.shape(m))  # a state-independent one

    def noisy(
        self,
        obs: tf.Tensor,
        eps: tf.Tensor,
        episode_start: tf.Tensor | None = None,
        state: tf.Tensor | None = None,
    ) -> dict[str, tf.Tensor]:
        # The formulas of export.folded_noise.NoisyPolicy, op for op.
        noise, transform, head = self._noise, self._c.transform, self._parts.head
        assert noise is not None
        if noise.kind == "policy":
            m, log_std = self.policy_distribution(obs)
            pre = m + tf.exp(log_std) * eps
            scaled = tf.tanh(pre) if head == "tanh_unscale" else tf.clip_by_value(pre, -1.0, 1.0)
            return {"action": _unscale(scaled, transform)}
        scaled = _squash(head, self.actor_out(obs))
        if noise.kind == "gaussian":
            sigma = tf.constant(np.float32(noise.sigma))
            return {"action": _unscale(tf.clip_by_value(scaled + sigma * eps, -1.0, 1.0), transform)}
        assert episode_start is not None and state is not None
        decay, scale = (tf.constant(c) for c in ou_constants(noise.theta, noise.sigma, noise.dt))
        x = state * (1.0 - episode_start)
        x = x - decay * x + scale * eps
        return {"action": _unscale(tf.clip_by_value(scaled + x, -1.0, 1.0), transform), STATE_OUTPUT: x}


def _squash(head: str, out: tf.Tensor) -> tf.Tensor:
    """The Box heads of export.deployable (DeployablePolicy.squash), op for op."""
    if head == "clip_unscale":
        return tf.clip_by_value(out, -1.0, 1.0)
    if head == "tanh_unscale":
        return tf.tanh(out)
    if head == "unscale":
        return out
    raise CheckpointError(f"action head {head!r} has no TF route")


def _unscale(scaled: tf.Tensor, transform: ActionTransform) -> tf.Tensor:
    return tf.constant(transform.center) + scaled * tf.constant(transform.half_range)


@dataclass
class TFSource(GraphSource):
    """A source whose deployable graph is a `TFDeployable`."""

    module: Any = None
    parts: GraphParts | None = None

    def __post_init__(self) -> None:
        assert self.parts is not None
        if self.module is None:
            self.module = TFDeployable(self.parts)
        if self.parts.frame_stack > 1:
            self.states = [frame_stack_state(self.observation.size, self.parts.frame_stack)]
            self.state_cell = FRAME_STACK_CELL
            self.reset()
        elif self.parts.net.rnn:
            kind, layers = self.parts.net.rnn
            self.states = rnn_state_tensors(kind, len(layers), layers[0][1].shape[0])
            self.state_cell = rnn_cell_text(kind)
            self.reset()

    def fold_noise(self, spec: NoiseSpec) -> None:
        super().fold_noise(spec)
        assert self.parts is not None
        if spec.kind == "policy" and not self.parts.has_distribution:
            raise CheckpointError("this checkpoint's policy has no standard deviation to sample with")
        self.module = TFDeployable(self.parts, spec)

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]:
        start = None if state is None else np.zeros((len(obs), 1), np.float32)  # OU: carried, never reset
        args = [self._rows(obs), *(np.asarray(a, np.float32) for a in (noise, start, state) if a is not None)]
        out = self.module.noisy_batch(*args)
        return out["action"].numpy(), (out[STATE_OUTPUT].numpy() if STATE_OUTPUT in out else None)

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, log_std = self.module.distribution(self._rows(obs))
        return m.numpy(), np.exp(log_std.numpy())

    def cell_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        args = [np.asarray(x, np.float32), np.full((1, 1), start, np.float32), *states]
        step = self.module.step(*args)  # a frame stack's and a cell's: action, out and the next states
        if "action" not in step:
            step = {**step, **self.module.serve(*args)}
        outputs = [step[t.output].numpy() for t in self.cell_states]
        return step["action"].numpy(), step["out"].numpy(), outputs

    def _rows(self, obs: np.ndarray) -> np.ndarray:
        """A batch of env observations as the graph takes them (an image's values flat: `flat_frames`)."""
        x = np.asarray(obs, np.float32)
        return x.reshape(len(x), -1) if self.flat_frames else x

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        return self.module.batch(self._rows(obs))["action"].numpy()

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        return self.module.pre_head(self._rows(obs)).numpy()

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        path = work / "saved_model"
        serve = self.module.serve
        if self.rate_limit is not None:
            from rl2edge.export.rate_limit import tf_rate_limited

            serve = tf_rate_limited(serve, self.max_step, stateful=bool(self.cell_states))
            self.module.limited = serve  # tracked by the module, so that the SavedModel keeps it
        tf.saved_model.save(self.module, str(path), signatures={"serving_default": serve})
        return path
