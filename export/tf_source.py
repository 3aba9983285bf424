"""A TF checkpoint as an export source: the deployable graph as a tf.function (normalization, actor and
head folded in, the same float32 formulas as the torch route), saved as a SavedModel that the same
TFLiteConverter step turns into every quantization mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.errors import CheckpointError
from rl2edge.export.source import ExportSource
from rl2edge.specs import ActionSpec, ActionTransform, NoiseSpec, ObservationSpec
from rl2edge.train.core.checkpoint import Checkpoint
from rl2edge.train.core.encoder_spec import checkpoint_normalizer
from rl2edge.train.core.frame_stack import stacked_spec
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
    one and keeps the K-1 previous ones as its state (export.graph_spec.FRAME_STACK_CELL)."""

    @property
    def has_distribution(self) -> bool:
        return self.net.log_std_dense is not None or self.net.log_std_const is not None


def _cell_gates(kind: str, layer: tuple[np.ndarray, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
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


def _deployable_module(parts: GraphParts, noise: NoiseSpec | None = None) -> Any:
    import tensorflow as tf

    from rl2edge.export.graph_spec import EPISODE_START, FRAMES, NOISE_INPUT, STATE_INPUT, STATE_OUTPUT
    from rl2edge.specs import ou_constants, rnn_state_tensors
    from rl2edge.train.tf_backend.nets import frozen_dense

    net = parts.net
    mean, inv_std = (c.reshape(-1) for c in parts.norm.constants())
    clip = float(parts.norm.clip) if parts.norm.enabled else None
    bounds = parts.norm.clip_bounds()  # per element where some are left raw (image keys): never clip pixels
    transform = ActionTransform(parts.action)
    head, obs_dim = parts.head, parts.obs_dim
    latent = frozen_dense(net.dense[: net.latent_depth]) if net.log_std_dense is not None else None
    mu = frozen_dense(net.dense[net.latent_depth :]) if latent is not None else None
    actor = net.actor_fn if net.actor_fn is not None else frozen_dense(net.dense)
    log_std_layer = frozen_dense([net.log_std_dense]) if net.log_std_dense is not None else None
    act_dim = parts.action.size
    obs_spec = lambda n, name=None: tf.TensorSpec([n, obs_dim], tf.float32, name=name)  # noqa: E731
    act_spec = lambda n, name=None: tf.TensorSpec([n, act_dim], tf.float32, name=name)  # noqa: E731

    # A recurrent actor: its LSTM or GRU as one cell, a FULLY_CONNECTED per gate (as the torch route's
    # LSTMCellActor and GRUCellActor), the state an explicit input and output, zeroed where episode_start is 1.
    kind, layers = net.rnn if net.rnn is not None else ("lstm", [])
    cells = [[(tf.constant(w), tf.constant(b)) for w, b in _cell_gates(kind, layer)] for layer in layers]
    states = rnn_state_tensors(kind, len(layers), layers[0][1].shape[0]) if layers else []
    state_specs = [tf.TensorSpec(list(t.shape), tf.float32, name=t.name) for t in states]

    k = parts.frame_stack
    frame_dim = obs_dim // k

    class Deployable(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="rl2edge_policy")
            if k > 1:
                signature = [
                    tf.TensorSpec([1, frame_dim], tf.float32, name="obs"),
                    tf.TensorSpec([1, 1], tf.float32, name=EPISODE_START),
                    tf.TensorSpec([1, (k - 1) * frame_dim], tf.float32, name=FRAMES),
                ]
                self.serve = tf.function(self._stacked, input_signature=signature)
                self.step = tf.function(self._stacked_step, input_signature=signature)
                return
            if cells:
                extra = [tf.TensorSpec([1, 1], tf.float32, name=EPISODE_START), *state_specs]
                self.serve = self._served(self._stateful, extra)  # one input per key for a Dict
                self.step = tf.function(self._full_step, input_signature=[obs_spec(1, "obs"), *extra])
                return
            self.batch = tf.function(self._forward, input_signature=[obs_spec(None)])
            self.pre_head = tf.function(self._pre_head, input_signature=[obs_spec(None)])
            if noise is None:
                self.serve = self._served(self._forward, [])
                return
            extra = [act_spec(1, NOISE_INPUT)]
            batch_signature = [obs_spec(None), act_spec(None)]
            if noise.kind == "ou":  # the state contract: episode_start, then the state
                extra += [tf.TensorSpec([1, 1], tf.float32, name=EPISODE_START), act_spec(1, STATE_INPUT)]
                batch_signature += [tf.TensorSpec([None, 1], tf.float32), act_spec(None)]
            self.serve = self._served(self._noisy, extra)
            self.noisy = tf.function(self._noisy, input_signature=batch_signature)
            if noise.kind == "policy":  # only a policy with a distribution has one to trace
                self.distribution = tf.function(self._distribution, input_signature=[obs_spec(None)])

        def _served(self, fn, extra):
            """The SavedModel's signature: `obs`, or one input per Dict key concatenated in order, then
            the `extra` inputs (folded noise)."""
            if not parts.obs_keys:
                return tf.function(fn, input_signature=[obs_spec(1, "obs"), *extra])
            n_keys = len(parts.obs_keys)

            def keyed(*args):
                return fn(tf.concat(list(args[:n_keys]), axis=-1), *args[n_keys:])

            keys = [tf.TensorSpec([1, n], tf.float32, name=k) for k, n in parts.obs_keys]
            return tf.function(keyed, input_signature=[*keys, *extra])

        def _normalized(self, obs):
            x = (obs - tf.constant(mean)) * tf.constant(inv_std)
            if bounds is not None:
                limit = tf.constant(bounds.reshape(-1))
                return tf.minimum(tf.maximum(x, -limit), limit)
            return tf.clip_by_value(x, -clip, clip) if clip is not None else x

        def _features(self, obs):
            """What the actor's layers take: the normalized observation, or its encoder's features."""
            x = self._normalized(obs)
            return net.encoder_fn(x) if net.encoder_fn is not None else x

        def _pre_head(self, obs):
            return actor(self._features(obs))

        def _step(self, obs, episode_start, *state):
            """The recurrent cell, then the actor's layers: the output before the head and the next states."""
            keep = 1.0 - episode_start
            x, new = self._features(obs), []
            for k, gates in enumerate(cells):
                if kind == "gru":
                    h = state[k] * keep
                    xh = tf.concat([x, h], axis=-1)
                    (w_r, b_r), (w_z, b_z), (w_nx, b_nx), (w_nh, b_nh) = gates
                    r, z = tf.sigmoid(tf.matmul(xh, w_r) + b_r), tf.sigmoid(tf.matmul(xh, w_z) + b_z)
                    n = tf.tanh(tf.matmul(x, w_nx) + b_nx + r * (tf.matmul(h, w_nh) + b_nh))
                    x = n + z * (h - n)
                    new.append(x)
                    continue
                h, c = state[2 * k] * keep, state[2 * k + 1] * keep
                xh = tf.concat([x, h], axis=-1)
                i, f, g, o = (tf.matmul(xh, kernel) + b for kernel, b in gates)
                c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
                x = tf.sigmoid(o) * tf.tanh(c)
                new += [x, c]
            return {
                "out": actor(x),
                **{t.output: v for t, v in zip(states, new, strict=True)},
            }

        def _stacked_step(self, obs, episode_start, frames):
            stacked = tf.concat([frames * (1.0 - episode_start), obs], axis=-1)
            return {"out": self._pre_head(stacked), f"{FRAMES}_out": stacked[:, frame_dim:]}

        def _stacked(self, obs, episode_start, frames):
            step = self._stacked_step(obs, episode_start, frames)
            out = step.pop("out")
            return {**self._forward_from(out), **step}

        def _forward_from(self, out):
            if transform.discrete:
                action = tf.argmax(out, axis=-1)
                return {"action": action + transform.start if transform.start else action}
            return {"action": _unscale(_squash(head, out), transform)}

        def _full_step(self, obs, episode_start, *state):
            """The source's step on the concatenated observation: the output before the head too."""
            step = self._step(obs, episode_start, *state)
            return {**self._forward_from(step["out"]), **step}

        def _stateful(self, obs, episode_start, *state):
            step = self._step(obs, episode_start, *state)
            out = step.pop("out")
            return {**self._forward_from(out), **step}

        def _forward(self, obs):
            out = self._pre_head(obs)
            if transform.discrete:
                action = tf.argmax(out, axis=-1)
                return {"action": action + transform.start if transform.start else action}
            return {"action": _unscale(_squash(head, out), transform)}

        def _distribution(self, obs):
            x = self._features(obs)
            if latent is not None:  # a log std on the latent
                h = latent(x)
                lo, hi = net.log_std_bounds
                return mu(h), tf.clip_by_value(log_std_layer(h), lo, hi)
            m = actor(x)
            return m, tf.broadcast_to(tf.constant(net.log_std_const), tf.shape(m))  # a state-independent one

        def _noisy(self, obs, eps, episode_start=None, state=None):
            # The formulas of export.folded_noise.NoisyPolicy, op for op.
            if noise.kind == "policy":
                m, log_std = self._distribution(obs)
                pre = m + tf.exp(log_std) * eps
                scaled = tf.tanh(pre) if head == "tanh_unscale" else tf.clip_by_value(pre, -1.0, 1.0)
                return {"action": _unscale(scaled, transform)}
            scaled = _squash(head, self._pre_head(obs))
            if noise.kind == "gaussian":
                sigma = tf.constant(np.float32(noise.sigma))
                return {"action": _unscale(tf.clip_by_value(scaled + sigma * eps, -1.0, 1.0), transform)}
            decay, scale = (tf.constant(c) for c in ou_constants(noise.theta, noise.sigma, noise.dt))
            x = state * (1.0 - episode_start)
            x = x - decay * x + scale * eps
            return {"action": _unscale(tf.clip_by_value(scaled + x, -1.0, 1.0), transform), STATE_OUTPUT: x}

    return Deployable()


def _squash(head: str, out: Any) -> Any:
    """The Box heads of export.deployable (DeployablePolicy.squash), op for op."""
    import tensorflow as tf

    if head == "clip_unscale":
        return tf.clip_by_value(out, -1.0, 1.0)
    if head == "tanh_unscale":
        return tf.tanh(out)
    if head == "unscale":
        return out
    raise CheckpointError(f"action head {head!r} has no TF route")


def _unscale(scaled: Any, transform: ActionTransform) -> Any:
    import tensorflow as tf

    return tf.constant(transform.center) + scaled * tf.constant(transform.half_range)


@dataclass
class TFSource(ExportSource):
    module: Any = None
    parts: GraphParts | None = None

    def fold_noise(self, spec: NoiseSpec) -> None:
        super().fold_noise(spec)
        assert self.parts is not None
        if spec.kind == "policy" and not self.parts.has_distribution:
            raise CheckpointError("this checkpoint's policy has no standard deviation to sample with")
        self.module = _deployable_module(self.parts, spec)

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]:
        from rl2edge.export.graph_spec import STATE_OUTPUT

        start = None if state is None else np.zeros((len(obs), 1), np.float32)  # OU: carried, never reset
        args = [np.asarray(a, np.float32) for a in (obs, noise, start, state) if a is not None]
        out = self.module.noisy(*args)
        return out["action"].numpy(), (out[STATE_OUTPUT].numpy() if STATE_OUTPUT in out else None)

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, log_std = self.module.distribution(np.asarray(obs, np.float32))
        return m.numpy(), np.exp(log_std.numpy())

    def __post_init__(self) -> None:
        assert self.parts is not None
        if self.parts.frame_stack > 1:
            from rl2edge.export.graph_spec import FRAME_STACK_CELL, frame_stack_state

            self.states = [frame_stack_state(self.observation.size, self.parts.frame_stack)]
            self.state_cell = FRAME_STACK_CELL
            self.reset()
        elif self.parts.net.rnn:
            from rl2edge.specs import rnn_cell_text, rnn_state_tensors

            kind, layers = self.parts.net.rnn
            self.states = rnn_state_tensors(kind, len(layers), layers[0][1].shape[0])
            self.state_cell = rnn_cell_text(kind)
            self.reset()

    def cell_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        args = [np.asarray(x, np.float32), np.full((1, 1), start, np.float32), *states]
        step = self.module.step(*args)  # a frame stack's and a cell's: action, out and the next states
        if "action" not in step:
            step = {**step, **self.module.serve(*args)}
        outputs = [step[t.output].numpy() for t in self.cell_states]
        return step["action"].numpy(), step["out"].numpy(), outputs

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        return self.module.batch(np.asarray(obs, np.float32))["action"].numpy()

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        return self.module.pre_head(np.asarray(obs, np.float32)).numpy()

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        import tensorflow as tf

        path = work / "saved_model"
        serve = self.module.serve
        if self.rate_limit is not None:
            from rl2edge.export.rate_limit import tf_rate_limited

            serve = tf_rate_limited(serve, self.max_step, stateful=bool(self.cell_states))
            self.module.limited = serve  # tracked by the module, so that the SavedModel keeps it
        tf.saved_model.save(self.module, str(path), signatures={"serving_default": serve})
        return path


def tf_source(ckpt: Checkpoint, agent: Any, description: dict[str, Any]) -> TFSource:
    """A TF checkpoint's export source; `agent` is its algorithm's TF agent class (train.algos), whose
    `deploy_parts` builds the networks from the checkpoint's network spec."""
    from rl2edge.export.graph_spec import head_for
    from rl2edge.train.tf_backend.setup import configure_tensorflow

    configure_tensorflow("cpu")
    meta = ckpt.meta

    def load(model: Any) -> None:
        try:
            model.load_weights(str(ckpt.weights_path))
        except Exception as exc:  # h5py and Keras raise several types for a bad file
            raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None

    net = agent.deploy_parts(meta["network"], load)
    observation = ObservationSpec.from_json(meta["observation_space"])
    action = ActionSpec.from_json(meta["action_space"])
    k = int(meta["network"].get("frame_stack", 1))  # the network takes the last k observations
    norm = checkpoint_normalizer(stacked_spec(observation, k), meta["normalization"])
    head = head_for(ckpt.algo, action.discrete)
    keys = tuple((key.name, key.size) for key in observation.keys)
    parts = GraphParts(net, norm, action, observation.size * k, head, keys, frame_stack=k)
    return TFSource(
        ckpt.env_id,
        observation,
        action,
        norm,
        head,
        description,
        "source (tf)",
        algo=ckpt.algo,
        policy_distribution=agent.policy_distribution,
        module=_deployable_module(parts),
        parts=parts,
    )
