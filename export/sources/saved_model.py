"""A TensorFlow SavedModel trained elsewhere (Keras's `model.export`, `tf.saved_model.save`), with its policy
spec, on the TF route (export.tf_graph): its serving signature, its variables frozen into constants (a
SavedModel that keeps Keras 3 variables converts to a TFLite file that reads them as zeros), between the
spec's normalization and head. Never imports torch.

The graph export verifies runs the signature itself: the reference is the SavedModel in TensorFlow, with
the spec's normalization and head around it. A stateful SavedModel is not taken yet (its state would
have to be explicit signature inputs and outputs): export it to ONNX with its state explicit instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.export.policy_spec import PolicySpec, load_policy_spec
from rl2edge.export.tf_graph import GraphParts, TFSource
from rl2edge.fileio import sha256_file

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions


@dataclass
class SavedModelSource(TFSource):
    """A SavedModel's graph; the batch of a signature fixed at 1 is honoured by running rows one by one."""

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [super(SavedModelSource, self).deployable_actions(o[None]) for o in np.asarray(obs)]
        )

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([super(SavedModelSource, self).pre_head(o[None]) for o in np.asarray(obs)])


def signature_actor(fn: Any, spec: PolicySpec, where: str) -> Any:
    """The signature, frozen, as the actor the TF route calls on a [batch, n] normalized observation."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    args, kwargs = (
        fn.structured_input_signature
    )  # a SavedModel's signature takes keywords, a traced call args
    shape_of = lambda s: tuple(-1 if d is None else int(d) for d in s.shape)  # noqa: E731
    inputs = {name: shape_of(s) for name, s in kwargs.items()} | {s.name: shape_of(s) for s in args}
    outputs = {name: shape_of(s) for name, s in fn.structured_outputs.items()}
    one = lambda s: (1, *s[1:]) if s and s[0] == -1 else s  # noqa: E731 (the batch is the caller's)
    spec.check_against({n: one(s) for n, s in inputs.items()}, {n: one(s) for n, s in outputs.items()})
    if spec.state or spec.per_key_inputs:
        raise ConfigError(
            f"{where}: a SavedModel with state or one input per key is not taken yet; export it to ONNX"
        )
    frozen = convert_variables_to_constants_v2(fn)
    out_name = spec.action.output or next(iter(outputs))
    index = sorted(outputs).index(out_name)  # the frozen function returns the outputs flattened, by name
    in_name = spec.inputs[0]
    in_shape = inputs[in_name]

    def actor(x: Any) -> Any:
        fed = tf.reshape(x, [-1, *in_shape[1:]])
        y = (frozen(**{in_name: fed}) if kwargs else frozen(fed))[index]
        return tf.reshape(tf.cast(y, tf.float32), [tf.shape(x)[0], -1])

    return actor


def saved_model_source(
    fn: Any, spec: PolicySpec, description: dict[str, Any], reference_name: str, env_id: str | None
) -> SavedModelSource:
    """The export source of a serving function `fn` (a loaded SavedModel's signature, or a Keras model's
    traced call) described by `spec`."""
    from rl2edge.train.tf_backend.nets import DeployParts

    net = DeployParts(dense=[], actor_fn=signature_actor(fn, spec, reference_name))
    parts = GraphParts(net, spec.normalization, spec.action.action, spec.observation.size, spec.action.head)
    return SavedModelSource(**spec.source_fields(env_id, description, reference_name), parts=parts)


def from_path(path: Path, options: SourceOptions) -> SavedModelSource:
    """export.sources' entry point."""
    import tensorflow as tf

    if options.spec is None:
        raise ConfigError(
            f"{path}: a SavedModel needs --spec SPEC.yaml (docs/export.md, 'Policies trained elsewhere')"
        )
    spec = load_policy_spec(options.spec)
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # TensorFlow raises several types for a folder that is no SavedModel
        raise ConfigError(f"{path} is not a loadable SavedModel: {exc}") from None
    signatures = dict(loaded.signatures)
    if "serving_default" not in signatures and len(signatures) != 1:
        raise ConfigError(f"{path}: no serving_default signature among {sorted(signatures)}")
    fn = signatures.get("serving_default") or next(iter(signatures.values()))
    env_id = options.env or spec.env_id
    description = spec.describe("saved-model", path, _tree_sha256(path), env_id)
    return saved_model_source(fn, spec, description, f"{path.name} (tensorflow)", env_id)


def _tree_sha256(path: Path) -> str:
    """One sha256 over the SavedModel's files (saved_model.pb and variables/), names and contents in order."""
    import hashlib

    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode() + b"\0" + sha256_file(f).encode())
    return digest.hexdigest()
