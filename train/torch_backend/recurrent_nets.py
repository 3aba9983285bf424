"""The recurrent actor-critic (sb3-contrib's RecurrentActorCriticPolicy with MlpLstmPolicy's layout): an LSTM
(or, with rnn_type gru, a GRU) on the observation in front of the actor's MLP, and in front of the critic's
either its own (enable_critic_lstm, the default), the actor's output with its gradient stopped
(shared_lstm), or a Linear layer. The MLPs, the heads and their distributions are PPO's (`ActorCritic`, on
the RNN's width).

`LSTMCellActor` and `GRUCellActor` are what export runs: one step of the actor's RNN written as its gate
arithmetic (MatMul/Add/Logistic/Tanh/Mul: no sequence op and no While loop in the exported graph), on
explicit state inputs (an LSTM's h and c, a GRU's h) that the graph zeroes where `episode_start` is 1.
"""

from __future__ import annotations

import itertools
from typing import TypeAlias

import numpy as np
import torch
from torch import nn

from rl2edge.specs import GRU_CELL, LSTM_CELL, StateTensor, rnn_state_tensors
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.rnn_cells import state_parts
from rl2edge.train.torch_backend.nets import ActorCritic, run_mlp

State = tuple[torch.Tensor, ...]  # an LSTM's (h, c), a GRU's (h,): each [layers, rows, hidden]
RNN: TypeAlias = "nn.LSTM | nn.GRU"


def run_rnn(
    rnn: RNN, x: torch.Tensor, starts: torch.Tensor, cuts: list[int], state: State
) -> tuple[torch.Tensor, State]:
    """`rnn` over [T, E, in] with each env's state zeroed where starts[t, e] is 1. `cuts`: the steps t >= 1
    where any env starts, found on the host: between two cuts no state is reset, so nn.LSTM (nn.GRU) runs
    the whole stretch in one call (on a late-training rollout of long episodes, a few calls per sequence)."""
    outs = []
    bounds = [0, *cuts, x.shape[0]]
    lstm = isinstance(rnn, nn.LSTM)
    for a, b in itertools.pairwise(bounds):
        keep = (1.0 - starts[a]).view(1, -1, 1)
        masked = tuple(s * keep for s in state)
        y, new = rnn(x[a:b], masked if lstm else masked[0])
        state = tuple(new) if lstm else (new,)
        outs.append(y)
    return torch.cat(outs), state


class RecurrentActorCritic(nn.Module):
    def __init__(self, spec: NetworkSpec):
        super().__init__()
        obs_dim, hidden, layers = (
            int(spec.obs_dim),
            int(spec.required("lstm_hidden_size")),
            int(spec.required("n_lstm_layers")),
        )
        self.discrete, self.hidden, self.layers = spec.is_discrete, hidden, layers
        self.kind = spec.rnn_kind
        self.shared = bool(spec.required("shared_lstm"))
        cell = nn.GRU if self.kind == "gru" else nn.LSTM
        self.heads = ActorCritic(
            hidden, spec.act_dim, spec.is_discrete, list(spec.net_arch), spec.activation,
            (spec.log_std_init or 0.0), None, spec.action_nvec,
        )  # fmt: skip
        # sb3-contrib's attribute names, whichever the cell (an sb3-contrib state_dict loads as it is)
        self.lstm_actor = cell(obs_dim, hidden, num_layers=layers)
        self.lstm_critic = cell(obs_dim, hidden, num_layers=layers) if spec.enable_critic_lstm else None
        self.critic_linear = (
            nn.Linear(obs_dim, hidden) if not spec.enable_critic_lstm and not self.shared else None
        )

    def zero_state(self, rows: int) -> State:
        return tuple(torch.zeros(self.layers, rows, self.hidden) for _ in range(state_parts(self.kind)))

    def latents(
        self, obs: torch.Tensor, starts: torch.Tensor, cuts: list[int], pi: State, vf: State | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's and the critic's inputs to their MLPs over [T, E] sequences."""
        latent_pi, _ = run_rnn(self.lstm_actor, obs, starts, cuts, pi)
        if self.lstm_critic is not None:
            assert vf is not None
            latent_vf, _ = run_rnn(self.lstm_critic, obs, starts, cuts, vf)
        elif self.shared:
            latent_vf = latent_pi.detach()
        else:
            assert self.critic_linear is not None
            latent_vf = self.critic_linear(obs)
        return latent_pi, latent_vf

    def evaluate_sequences(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        starts: torch.Tensor,
        cuts: list[int],
        pi: State,
        vf: State | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probs, entropies and values of a minibatch's [T, E] steps, flattened to [T * E]."""
        latent_pi, latent_vf = self.latents(obs, starts, cuts, pi, vf)
        n = obs.shape[0] * obs.shape[1]
        flat_actions = actions.reshape(n, *actions.shape[2:])
        terms = self.heads.action_terms(run_mlp(self.heads.actor, latent_pi.reshape(n, -1)), flat_actions)
        values = run_mlp(self.heads.critic, latent_vf.reshape(n, -1)).squeeze(-1)
        return terms.logp, terms.entropy, values


def rnn_layers_numpy(rnn: RNN) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Each layer's (kernel_ih [in, G*H], kernel_hh [H, G*H], b_ih, b_hh) for the numpy rollout
    (train.core.rnn_cells)."""
    value = lambda name: getattr(rnn, name).detach().cpu().numpy()  # noqa: E731
    return [
        (
            value(f"weight_ih_l{k}").T,
            value(f"weight_hh_l{k}").T,
            value(f"bias_ih_l{k}"),
            value(f"bias_hh_l{k}"),
        )
        for k in range(rnn.num_layers)
    ]


def cell_actor(net: RecurrentActorCritic) -> nn.Module:
    """The deployable one-step actor of a recurrent actor-critic's cell."""
    return GRUCellActor(net) if net.kind == "gru" else LSTMCellActor(net)


def _linear(weight: torch.Tensor, bias: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(weight.shape[1], weight.shape[0])
    lin.weight.data, lin.bias.data = weight.clone(), bias.clone()
    return lin


def _joint_gate(
    w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor, g: int
) -> nn.Linear:
    """Gate g of a layer as one Linear on [x, h] with b_ih + b_hh: one FULLY_CONNECTED op, no Split of a
    G*H vector."""
    rows = slice(g * w_hh.shape[1], (g + 1) * w_hh.shape[1])
    return _linear(torch.cat([w_ih[rows], w_hh[rows]], dim=1), b_ih[rows] + b_hh[rows])


class _CellActor(nn.Module):
    """The deployable actor of a recurrent actor-critic: one step of its actor's RNN per call, gate by gate,
    then the actor's MLP. Inputs: the normalized observation [1, in], episode_start [1, 1] and each state
    tensor [1, H] (`state_tensors`); outputs the MLP's output (logits or the Gaussian's mean) and the next
    state tensors. A subclass lays out one layer's gates and steps them."""

    CELL = ""
    KIND = ""

    def __init__(self, net: RecurrentActorCritic):
        super().__init__()
        self.layers, self.hidden = net.layers, net.hidden
        self.actor = net.heads.actor
        if not net.discrete:
            self.register_buffer("log_std", net.heads.log_std.detach().clone())
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        self.gates = nn.ModuleList(
            nn.ModuleList(self.layer_gates(*(getattr(net.lstm_actor, f"{n}_l{k}").detach() for n in names)))
            for k in range(net.layers)
        )

    def layer_gates(
        self, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
    ) -> list[nn.Linear]:
        raise NotImplementedError

    def state_tensors(self) -> list[StateTensor]:
        """Each state input, in the graph's order."""
        return rnn_state_tensors(self.KIND, self.layers, self.hidden)


class LSTMCellActor(_CellActor):
    """An LSTM's: gates i, f, g, o each on [x, h]; per layer the state h and c."""

    CELL, KIND = LSTM_CELL, "lstm"

    def layer_gates(
        self, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
    ) -> list[nn.Linear]:
        return [_joint_gate(w_ih, w_hh, b_ih, b_hh, g) for g in range(4)]

    def step(
        self, x: torch.Tensor, episode_start: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        keep = 1.0 - episode_start
        new: list[torch.Tensor] = []
        for k, (i_g, f_g, g_g, o_g) in enumerate(self.gates):
            h, c = states[2 * k] * keep, states[2 * k + 1] * keep
            xh = torch.cat([x, h], dim=-1)
            c = torch.sigmoid(f_g(xh)) * c + torch.sigmoid(i_g(xh)) * torch.tanh(g_g(xh))
            x = torch.sigmoid(o_g(xh)) * torch.tanh(c)
            new += [x, c]
        return self.actor(x), new


class GRUCellActor(_CellActor):
    """A GRU's: r and z each on [x, h]; n's part on x and its part on h as two Linears, since torch's
    reset gate multiplies h's part with its bias (b_hn) inside; per layer the state h."""

    CELL, KIND = GRU_CELL, "gru"

    def layer_gates(
        self, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
    ) -> list[nn.Linear]:
        n = slice(2 * w_hh.shape[1], 3 * w_hh.shape[1])
        return [
            _joint_gate(w_ih, w_hh, b_ih, b_hh, 0),
            _joint_gate(w_ih, w_hh, b_ih, b_hh, 1),
            _linear(w_ih[n], b_ih[n]),
            _linear(w_hh[n], b_hh[n]),
        ]

    def step(
        self, x: torch.Tensor, episode_start: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        keep = 1.0 - episode_start
        new: list[torch.Tensor] = []
        for k, (r_g, z_g, n_x, n_h) in enumerate(self.gates):
            h = states[k] * keep
            xh = torch.cat([x, h], dim=-1)
            r, z = torch.sigmoid(r_g(xh)), torch.sigmoid(z_g(xh))
            n = torch.tanh(n_x(x) + r * n_h(h))
            x = n + z * (h - n)
            new.append(x)
        return self.actor(x), new
