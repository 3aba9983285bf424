"""The recurrent cells of ppo_lstm and a2c_lstm in numpy: one step of a stacked LSTM or GRU, with torch's
gate order and biases, for the rollout and the periodic evaluation (train.core.recurrent_rollout).

A layer is (kernel_ih [in, G*H], kernel_hh [H, G*H], b_ih [G*H], b_hh [G*H]) with G = 4 gates for an LSTM
(i, f, g, o) and 3 for a GRU (r, z, n). A state is a tuple of [layers, rows, H] arrays: (h, c) for an LSTM,
(h,) for a GRU (rl2edge.specs.RNN_PARTS), each layer's part one of the cell's state tensors
(rl2edge.specs.rnn_state_tensors, the exported graph's) with one row per env.
"""

from __future__ import annotations

import numpy as np

from rl2edge.specs import RNN_PARTS, rnn_state_tensors

RNNLayer = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
RNNState = tuple[np.ndarray, ...]


def state_parts(kind: str) -> int:
    """How many [layers, rows, H] tensors a cell's state has: an LSTM's h and c, a GRU's h."""
    return len(RNN_PARTS[kind])


def zero_state(kind: str, layers: int, rows: int, hidden: int) -> RNNState:
    """The state after a reset, for `rows` envs: each part's state tensors' initial values, stacked by layer."""
    tensors, parts = rnn_state_tensors(kind, layers, hidden), state_parts(kind)
    return tuple(np.stack([t.initial_value(rows) for t in tensors[j::parts]]) for j in range(parts))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def lstm_step(layers: list[RNNLayer], x: np.ndarray, state: RNNState) -> tuple[np.ndarray, RNNState]:
    """One step of a stacked LSTM on [rows, in]: the top layer's h, and the new (h, c)."""
    hs, cs = [], []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        gates = x @ w_ih
        gates += state[0][k] @ w_hh
        gates += b_ih + b_hh
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = _sigmoid(f) * state[1][k] + _sigmoid(i) * np.tanh(g)
        x = _sigmoid(o) * np.tanh(c)
        hs.append(x)
        cs.append(c)
    return x, (np.stack(hs).astype(np.float32), np.stack(cs).astype(np.float32))


def gru_step(layers: list[RNNLayer], x: np.ndarray, state: RNNState) -> tuple[np.ndarray, RNNState]:
    """One step of a stacked GRU on [rows, in] (torch's nn.GRU: b_hn inside the reset gate's product):
    the top layer's h, and the new (h,)."""
    hs = []
    for k, (w_ih, w_hh, b_ih, b_hh) in enumerate(layers):
        h = state[0][k]
        i_r, i_z, i_n = np.split(x @ w_ih + b_ih, 3, axis=-1)
        h_r, h_z, h_n = np.split(h @ w_hh + b_hh, 3, axis=-1)
        r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
        n = np.tanh(i_n + r * h_n)
        x = n + z * (h - n)
        hs.append(x)
    return x, (np.stack(hs).astype(np.float32),)


def rnn_step(
    kind: str, layers: list[RNNLayer], x: np.ndarray, state: RNNState
) -> tuple[np.ndarray, RNNState]:
    return {"lstm": lstm_step, "gru": gru_step}[kind](layers, x, state)
