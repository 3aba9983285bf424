"""Small ONNX policy files built with onnx.helper, for the tests of what the import of a file trained
elsewhere refuses (the peer files the success paths use come from rsl-rl: testkit.rsl_rl_env)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def linear_policy(
    path: Path,
    obs: int = 3,
    act: int = 1,
    *,
    obs_dims: list[int | str] | None = None,
    scaler: bool = False,
    state: int = 0,
    state_out: int | None = None,
    weights: float | None = None,
) -> Path:
    """obs [1, obs] -> actions = obs @ W + b [1, act]. `obs_dims`: the input's declared shape (a string is a
    dynamic dimension); `scaler`: an ai.onnx.ml Scaler in front (onnxruntime runs it, onnx2tf has no
    conversion for it); `state`: a state input h_in [1, state] and an output h_out [1, state_out or state];
    `weights`: every entry of W that value (nan: a diverged file; 0: a policy blind to its input)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "obs"
    if scaler:
        nodes.append(
            helper.make_node(
                "Scaler", [x], ["scaled"], domain="ai.onnx.ml", offset=[0.0] * obs, scale=[0.5] * obs
            )
        )
        x = "scaled"
    inits += [
        numpy_helper.from_array(
            rng.normal(size=(obs, act)).astype(np.float32)
            if weights is None
            else np.full((obs, act), weights, np.float32),
            "W",
        ),
        numpy_helper.from_array(np.full(act, 0.1, np.float32), "b"),
    ]
    nodes.append(helper.make_node("Gemm", [x, "W", "b"], ["actions"]))
    inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, obs_dims or [1, obs])]
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, act])]
    if state:
        out_size = state_out or state
        inits.append(numpy_helper.from_array(np.eye(state, out_size, dtype=np.float32) * 0.5, "R"))
        nodes.append(helper.make_node("MatMul", ["h_in", "R"], ["h_out"]))
        inputs.append(helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, state]))
        outputs.append(helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, out_size]))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("ai.onnx.ml", 3)] if scaler else [])
    model = helper.make_model(
        helper.make_graph(nodes, "policy", inputs, outputs, inits), opset_imports=opsets
    )
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def keyed_policy(path: Path, keys: dict[str, int], act: int) -> Path:
    """One input per Dict key (named `<key>_in`, [1, size]), concatenated in the given order, then a linear
    layer: actions = concat(keys) @ W + b [1, act]."""
    rng = np.random.default_rng(1)
    size = sum(keys.values())
    inits = [
        numpy_helper.from_array(rng.normal(size=(size, act)).astype(np.float32) * 0.5, "W"),
        numpy_helper.from_array(np.zeros(act, np.float32), "b"),
    ]
    names = [f"{k}_in" for k in keys]
    nodes = [
        helper.make_node("Concat", names, ["x"], axis=-1),
        helper.make_node("Gemm", ["x", "W", "b"], ["actions"]),
    ]
    inputs = [helper.make_tensor_value_info(f"{k}_in", TensorProto.FLOAT, [1, n]) for k, n in keys.items()]
    outputs = [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, act])]
    model = helper.make_model(
        helper.make_graph(nodes, "policy", inputs, outputs, inits),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def with_external_data(path: Path, location: str) -> Path:
    """The model at `path` rewritten to keep its weights in one external file `location` beside it (as
    torch.onnx.export does for large models); returns that file."""
    model = onnx.load(str(path))
    onnx.save_model(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
        size_threshold=0,
    )  # fmt: skip
    return path.parent / location


def point_external_data_at(path: Path, location: str) -> None:
    """Every external tensor of the model at `path` names `location` (what an adversary's file could say)."""
    model = onnx.load(str(path), load_external_data=False)
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(path))
