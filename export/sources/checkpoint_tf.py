"""A TF checkpoint's export source: the agent class's `deploy_parts` (frozen layers, the log std, a
recurrent actor's cells) on the TF route (export.tf_graph). Never imports torch."""

from __future__ import annotations

from typing import Any

from rl2edge.errors import CheckpointError
from rl2edge.export.graph_spec import head_for
from rl2edge.export.tf_graph import GraphParts, TFSource
from rl2edge.train.core.checkpoint import Checkpoint


def source(ckpt: Checkpoint, agent: Any, description: dict[str, Any]) -> TFSource:
    from rl2edge.train.tf_backend.setup import configure_tensorflow

    configure_tensorflow("cpu")

    def load(model: Any) -> None:
        try:
            model.load_weights(str(ckpt.weights_path))
        except Exception as exc:  # h5py and Keras raise several types for a bad file
            raise CheckpointError(f"cannot load weights {ckpt.weights_path}: {exc}") from None

    net = agent.deploy_parts(ckpt.network, load)
    norm = ckpt.normalizer()  # over the K observations of a frame stack
    head = head_for(ckpt.algo, ckpt.action.categorical)
    keys = tuple((key.name, key.size) for key in ckpt.observation.keys)
    k = ckpt.frame_stack
    matrix = ckpt.observation.shape if ckpt.observation.is_matrix else ()  # an image Box: taken flat
    parts = GraphParts(
        net, norm, ckpt.action, ckpt.observation.size * k, head, keys, frame_stack=k, matrix_shape=matrix
    )
    return TFSource(
        ckpt.env_id,
        ckpt.observation,
        ckpt.action,
        norm,
        head,
        description,
        "source (tf)",
        algo=ckpt.algo,
        policy_distribution=agent.policy_distribution,
        parts=parts,
        flat_frames=ckpt.observation.is_image,
    )
