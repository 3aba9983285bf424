"""A TF checkpoint as an export source: the deployable graph as a tf.function (normalization, actor and
head folded in, the same float32 formulas as the torch route), saved as a SavedModel that the same
TFLiteConverter step turns into every quantization mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import CheckpointError
from rl2edge.export.source import ExportSource
from rl2edge.specs import ActionTransform, is_discrete
from rl2edge.train.core.checkpoint import Checkpoint
from rl2edge.train.core.normalization import RunningNormalizer


def _frozen_actor(dense: list[Any]) -> Any:
    """A chain of Dense layers with its weights as graph constants. A SavedModel whose Keras 3 variables
    are left as variables converts to a TFLite file that reads them as zeros; constants convert exactly."""
    import tensorflow as tf

    layers = [(tf.constant(d.kernel.numpy()), tf.constant(d.bias.numpy()), d.activation) for d in dense]

    def actor(x):
        for kernel, bias, activation in layers:
            x = activation(tf.matmul(x, kernel) + bias)
        return x

    return actor


@dataclass
class GraphParts:
    """What the TF deployable graph is built from: frozen actor layers, the normalizer, the head, and for
    `policy` noise the policy's log std (SAC: a Dense on the actor's latent; PPO: a constant)."""

    dense: list[Any]
    norm: RunningNormalizer
    action_spec: dict[str, Any]
    obs_dim: int
    head: str
    log_std_dense: Any = None
    latent_depth: int = 0
    log_std_const: np.ndarray | None = None
    log_std_bounds: tuple[float, float] = (-20.0, 2.0)
    actor_fn: Any = None
    """The actor when it is not a chain of Dense layers (Rainbow's dueling/C51 head): normalized obs ->
    the head's input, weights as constants."""


def _deployable_module(parts: GraphParts, noise: Any = None) -> Any:
    import tensorflow as tf

    from rl2edge.export.graph_spec import NOISE_INPUT, STATE_INPUT, STATE_OUTPUT
    from rl2edge.specs import ou_constants

    mean, inv_std = (c.reshape(-1) for c in parts.norm.constants())
    clip = float(parts.norm.clip) if parts.norm.enabled else None
    transform = ActionTransform(parts.action_spec)
    head, obs_dim = parts.head, parts.obs_dim
    latent = _frozen_actor(parts.dense[: parts.latent_depth]) if parts.log_std_dense is not None else None
    mu = _frozen_actor(parts.dense[parts.latent_depth :]) if latent is not None else None
    actor = parts.actor_fn if parts.actor_fn is not None else _frozen_actor(parts.dense)
    log_std_layer = _frozen_actor([parts.log_std_dense]) if parts.log_std_dense is not None else None
    act_dim = 1 if transform.discrete else int(np.prod(parts.action_spec["shape"]))
    obs_spec = lambda n, name=None: tf.TensorSpec([n, obs_dim], tf.float32, name=name)  # noqa: E731
    act_spec = lambda n, name=None: tf.TensorSpec([n, act_dim], tf.float32, name=name)  # noqa: E731

    class Deployable(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="rl2edge_policy")
            self.batch = tf.function(self._forward, input_signature=[obs_spec(None)])
            self.pre_head = tf.function(self._pre_head, input_signature=[obs_spec(None)])
            if noise is None:
                self.serve = tf.function(self._forward, input_signature=[obs_spec(1, "obs")])
                return
            signature = [obs_spec(1, "obs"), act_spec(1, NOISE_INPUT)]
            batch_signature = [obs_spec(None), act_spec(None)]
            if noise.kind == "ou":
                signature.append(act_spec(1, STATE_INPUT))
                batch_signature.append(act_spec(None))
            self.serve = tf.function(self._noisy, input_signature=signature)
            self.noisy = tf.function(self._noisy, input_signature=batch_signature)
            if noise.kind == "policy":  # only a policy with a distribution has one to trace
                self.distribution = tf.function(self._distribution, input_signature=[obs_spec(None)])

        def _normalized(self, obs):
            x = (obs - tf.constant(mean)) * tf.constant(inv_std)
            return tf.clip_by_value(x, -clip, clip) if clip is not None else x

        def _pre_head(self, obs):
            return actor(self._normalized(obs))

        def _forward(self, obs):
            out = self._pre_head(obs)
            if transform.discrete:
                action = tf.argmax(out, axis=-1)
                return {"action": action + transform.start if transform.start else action}
            return {"action": _unscale(_squash(head, out), transform)}

        def _distribution(self, obs):
            x = self._normalized(obs)
            if latent is not None:  # SAC
                h = latent(x)
                lo, hi = parts.log_std_bounds
                return mu(h), tf.clip_by_value(log_std_layer(h), lo, hi)
            m = actor(x)
            return m, tf.broadcast_to(tf.constant(parts.log_std_const), tf.shape(m))  # PPO

        def _noisy(self, obs, eps, state=None):
            # The formulas of export.noise.NoisyPolicy, op for op.
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
            x = state - decay * state + scale * eps
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

    def fold_noise(self, spec: Any) -> None:
        super().fold_noise(spec)
        if spec.kind == "policy" and self.parts.log_std_dense is None and self.parts.log_std_const is None:
            raise CheckpointError("this checkpoint's policy has no standard deviation to sample with")
        self.module = _deployable_module(self.parts, spec)

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]:
        from rl2edge.export.graph_spec import STATE_OUTPUT

        args = [np.asarray(a, np.float32) for a in (obs, noise, state) if a is not None]
        out = self.module.noisy(*args)
        return out["action"].numpy(), (out[STATE_OUTPUT].numpy() if STATE_OUTPUT in out else None)

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m, log_std = self.module.distribution(np.asarray(obs, np.float32))
        return m.numpy(), np.exp(log_std.numpy())

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
    from rl2edge.export.graph_spec import head_for
    from rl2edge.train.tf_backend.nets import dense_layers
    from rl2edge.train.tf_backend.setup import configure_tensorflow

    configure_tensorflow("cpu")
    meta = ckpt.meta
    spec = meta["network"]
    kind = spec.get("type")
    if kind == "actor_critic_mlp":
        from rl2edge.train.tf_backend.nets import TFActorCritic

        model: Any = TFActorCritic.from_network_spec(spec)
    else:
        from rl2edge.train.tf_backend.nets import nets_from_spec

        try:
            model = nets_from_spec(spec)
        except ValueError as exc:
            raise CheckpointError(f"{exc} in {ckpt.path}") from None
    try:
        model.load_weights(str(ckpt.weights_path))
    except Exception as exc:  # h5py and Keras raise several types for a bad file
        raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None
    dense = dense_layers(model.actor) if kind == "actor_critic_mlp" else model.deploy_dense()
    shape = tuple(meta["observation_space"]["shape"])
    norm = RunningNormalizer.from_dict(shape, meta["normalization"])
    head = head_for(ckpt.algo, is_discrete(meta["action_space"]))
    parts = GraphParts(dense, norm, meta["action_space"], int(np.prod(shape)), head)
    if kind == "sac_mlp":
        parts.log_std_dense = dense_layers(model.log_std)[0]
        parts.latent_depth = len(dense_layers(model.latent))
        parts.log_std_bounds = (float(spec["log_std_min"]), float(spec["log_std_max"]))
    elif kind == "rainbow_mlp":  # expected Q over the atoms, mean weights of the noisy layers
        parts.actor_fn = model.q_net.frozen_expected_q()
    elif kind == "actor_critic_mlp" and getattr(model, "log_std", None) is not None:
        parts.log_std_const = model.log_std.numpy().astype(np.float32)
    module = _deployable_module(parts)
    return TFSource(
        ckpt.env_id,
        meta["observation_space"],
        meta["action_space"],
        norm,
        head,
        description,
        "source (tf)",
        algo=ckpt.algo,
        module=module,
        parts=parts,
    )
