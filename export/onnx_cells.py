"""A recurrent ONNX file's LSTM and GRU nodes as one step of gates, the arithmetic every rl2edge artifact
carries its recurrent cells in (rl2edge.specs.LSTM_CELL, GRU_CELL): one MatMul per gate on [x, h] and the
LOGISTIC, TANH, MUL and ADD between them, no sequence op. TFLite's converter crashes quantizing a
sequence LSTM to int8, and a one-step cell needs none; the file itself, run by onnxruntime with its own
LSTM op, stays the reference the rewritten graph is checked against.

Taken: a forward node over a sequence of 1 (what a policy called once per control cycle exports), with
its weights as initializers, default activations, no peepholes, no clip; a GRU with torch's
linear_before_reset = 1. Anything else is refused with one line naming the node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.errors import ConfigError


def unroll_recurrent_nodes(model: Any) -> Any:
    """`model` with each LSTM and GRU node replaced by its one-step gates (module docstring)."""
    import onnx
    from onnx import helper

    model = onnx.shape_inference.infer_shapes(model)
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*g.input, *g.value_info, *g.output]
    }
    nodes: list[Any] = []
    new_inits: list[Any] = []
    used: set[str] = set()
    for node in g.node:
        if node.op_type not in ("LSTM", "GRU"):
            nodes.append(node)
            continue
        where = f"{node.op_type} node {node.name or node.output[0]!r}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        _check(where, node, attrs, shapes)
        _one_step(
            node,
            [_array(where, inits, name) for name in node.input[1:4]],
            _Builder(node.output[0] or node.name, nodes, new_inits),
        )
        used.update(name for name in node.input[1:4] if name)
    del g.node[:]
    g.node.extend(nodes)
    kept = [i for i in g.initializer if i.name not in used or _still_used(i.name, nodes)]
    del g.initializer[:]
    g.initializer.extend([*kept, *new_inits])
    del g.value_info[:]  # shapes inferred for the old nodes; onnx infers them again where needed
    return model


def _one_step(node: Any, weights: list[np.ndarray | None], add: _Builder) -> None:
    """The node's one step: its gates on [x, h] (module docstring), its outputs under their own names."""
    w, r = weights[0][0], weights[1][0]  # type: ignore[index]  # [G*H, in], [G*H, H]: one direction
    hidden = r.shape[1]
    b = weights[2][0] if weights[2] is not None else np.zeros(2 * w.shape[0], np.float32)
    b_w, b_r = b[: w.shape[0]], b[w.shape[0] :]
    gates = lambda k: slice(k * hidden, (k + 1) * hidden)  # noqa: E731
    x = add.op("Reshape", [node.input[0], add.const("x_shape", [1, -1], np.int64)], "x")
    h = _initial(add, node, 5, hidden, "h")
    xh = add.op("Concat", [x, h], "xh", axis=-1)

    def fc(name: str, inp: str, kernel: np.ndarray, bias: np.ndarray) -> str:
        prod = add.op("MatMul", [inp, add.const(f"{name}_w", kernel.astype(np.float32))], f"{name}_mm")
        return add.op("Add", [prod, add.const(f"{name}_b", bias.reshape(1, -1).astype(np.float32))], name)

    def joint(name: str, k: int) -> str:
        """Gate k on [x, h]: one MatMul with both kernels stacked, the two biases summed."""
        kernel = np.concatenate([w[gates(k)], r[gates(k)]], axis=1).T
        return fc(name, xh, kernel, b_w[gates(k)] + b_r[gates(k)])

    if node.op_type == "LSTM":  # ONNX's gate order: i, o, f, c
        c = _initial(add, node, 6, hidden, "c")
        i_g, o_g, f_g, c_g = (joint(n, k) for k, n in enumerate(("i", "o", "f", "g")))
        keep_c = add.op("Mul", [add.op("Sigmoid", [f_g], "sig_f"), c], "keep_c")
        write_c = add.op(
            "Mul", [add.op("Sigmoid", [i_g], "sig_i"), add.op("Tanh", [c_g], "tanh_g")], "write_c"
        )
        c_new = add.op("Add", [keep_c, write_c], "c_new")
        h_new = add.op("Mul", [add.op("Sigmoid", [o_g], "sig_o"), add.op("Tanh", [c_new], "tanh_c")], "h_new")
        _outputs(add, node, h_new, c_new, hidden)
        return
    # GRU, ONNX's gate order: z, r, h; linear_before_reset: the reset gate multiplies (h @ R_h + Rb_h)
    z = add.op("Sigmoid", [joint("z", 0)], "sig_z")
    r_g = add.op("Sigmoid", [joint("r", 1)], "sig_r")
    n_x = fc("n_x", x, w[gates(2)].T, b_w[gates(2)])
    n_h = fc("n_h", h, r[gates(2)].T, b_r[gates(2)])
    n = add.op("Tanh", [add.op("Add", [n_x, add.op("Mul", [r_g, n_h], "r_nh")], "n_pre")], "n")
    # h' = (1 - z) * n + z * h, as n + z * (h - n)
    h_new = add.op("Add", [n, add.op("Mul", [z, add.op("Sub", [h, n], "h_minus_n")], "z_step")], "h_new")
    _outputs(add, node, h_new, None, hidden)


def _check(where: str, node: Any, attrs: dict[str, Any], shapes: dict[str, list[int]]) -> None:
    if attrs.get("direction", b"forward") not in (b"forward", "forward"):
        raise ConfigError(
            f"{where}: a {attrs['direction']!r} recurrent layer is not supported; export it forward"
        )
    if "activations" in attrs or "clip" in attrs or attrs.get("input_forget", 0):
        raise ConfigError(f"{where}: non-default activations, clip or input_forget are not supported")
    if node.op_type == "LSTM" and len(node.input) > 7 and node.input[7]:
        raise ConfigError(f"{where}: an LSTM with peepholes is not supported")
    if node.op_type == "GRU" and attrs.get("linear_before_reset", 0) != 1:
        raise ConfigError(f"{where}: a GRU with linear_before_reset 0 is not supported (torch exports 1)")
    if len(node.input) > 4 and node.input[4]:
        raise ConfigError(f"{where}: sequence_lens is not supported; export the cell for one step")
    seq = shapes.get(node.input[0], [0])
    if not seq or seq[0] != 1:
        raise ConfigError(
            f"{where}: its input {node.input[0]!r} has a sequence of {seq[0] if seq else 'unknown'} steps; a policy "
            "file runs one step per call"
        )


def _array(where: str, inits: dict[str, Any], name: str) -> np.ndarray | None:
    from onnx import numpy_helper

    if not name:
        return None
    if name not in inits:
        raise ConfigError(
            f"{where}: its weights {name!r} are computed in the graph; export them as constants"
        )
    return np.asarray(numpy_helper.to_array(inits[name]), np.float32)


def _still_used(name: str, nodes: list[Any]) -> bool:
    return any(name in n.input for n in nodes)


class _Builder:
    def __init__(self, prefix: str, nodes: list[Any], inits: list[Any]):
        self.prefix, self.nodes, self.inits = f"{prefix}/cell", nodes, inits

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        full = f"{self.prefix}/{name}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), full))
        return full

    def op(self, kind: str, ins: list[str], name: str, **attrs: Any) -> str:
        from onnx import helper

        out = f"{self.prefix}/{name}"
        self.nodes.append(helper.make_node(kind, ins, [out], name=out, **attrs))
        return out


def _initial(add: _Builder, node: Any, index: int, hidden: int, name: str) -> str:
    """The node's initial h (index 5) or c (6) as [1, H]; zeros where the node has none."""
    if len(node.input) > index and node.input[index]:
        return add.op(
            "Reshape", [node.input[index], add.const(f"{name}_shape", [1, hidden], np.int64)], f"{name}0"
        )
    return add.const(f"{name}0", np.zeros((1, hidden)))


def _outputs(add: _Builder, node: Any, h_new: str, c_new: str | None, hidden: int) -> None:
    """The node's outputs from the step: Y [1, 1, 1, H], Y_h and Y_c [1, 1, H], under their own names."""
    from onnx import helper

    targets = [(0, h_new, [1, 1, 1, hidden]), (1, h_new, [1, 1, hidden])]
    if c_new is not None:
        targets.append((2, c_new, [1, 1, hidden]))
    for index, value, shape in targets:
        if len(node.output) > index and node.output[index]:
            shape_name = add.const(f"out{index}_shape", shape, np.int64)
            add.nodes.append(
                helper.make_node(
                    "Reshape", [value, shape_name], [node.output[index]], name=node.output[index]
                )
            )
