"""The recurrent actor-critic (sb3-contrib's RecurrentActorCriticPolicy with MlpLstmPolicy's layout): an LSTM
on the observation in front of the actor's MLP, and in front of the critic's either its own LSTM
(enable_critic_lstm, the default), the actor's output with its gradient stopped (shared_lstm), or a
Linear layer. The MLPs, the heads and their distributions are PPO's (`ActorCritic`, on the LSTM's width).

`LSTMCellActor` is what export runs: one step of the actor's LSTM written as its gate arithmetic
(MatMul/Add/Logistic/Tanh/Mul: no sequence op and no While loop in the exported graph), on explicit
(h, c) inputs that the graph zeroes where `episode_start` is 1.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.specs import LSTM_CELL, lstm_state_tensors
from rl2edge.train.torch_backend.nets import ActorCritic, run_mlp

State = tuple[torch.Tensor, torch.Tensor]  # (h, c), each [layers, rows, hidden]


def run_lstm(
    lstm: nn.LSTM, x: torch.Tensor, starts: torch.Tensor, cuts: list[int], state: State
) -> tuple[torch.Tensor, State]:
    """`lstm` over [T, E, in] with each env's state zeroed where starts[t, e] is 1. `cuts`: the steps t >= 1
    where any env starts, found on the host: between two cuts no state is reset, so nn.LSTM runs the
    whole stretch in one call (on a late-training rollout of long episodes, a few calls per sequence)."""
    outs = []
    bounds = [0, *cuts, x.shape[0]]
    h, c = state
    for a, b in itertools.pairwise(bounds):
        keep = (1.0 - starts[a]).view(1, -1, 1)
        y, (h, c) = lstm(x[a:b], (h * keep, c * keep))
        outs.append(y)
    return torch.cat(outs), (h, c)


class RecurrentActorCritic(nn.Module):
    def __init__(self, spec: dict[str, Any]):
        super().__init__()
        obs_dim, hidden, layers = (
            int(spec["obs_dim"]),
            int(spec["lstm_hidden_size"]),
            int(spec["n_lstm_layers"]),
        )
        self.discrete, self.hidden, self.layers = bool(spec["discrete"]), hidden, layers
        self.shared = bool(spec["shared_lstm"])
        self.heads = ActorCritic(
            hidden, spec["act_dim"], spec["discrete"], list(spec["net_arch"]), spec["activation"],
            spec.get("log_std_init", 0.0),
        )  # fmt: skip
        self.lstm_actor = nn.LSTM(obs_dim, hidden, num_layers=layers)
        self.lstm_critic = nn.LSTM(obs_dim, hidden, num_layers=layers) if spec["enable_critic_lstm"] else None
        self.critic_linear = (
            nn.Linear(obs_dim, hidden) if not spec["enable_critic_lstm"] and not self.shared else None
        )

    def zero_state(self, rows: int) -> State:
        z = torch.zeros(self.layers, rows, self.hidden)
        return z, z.clone()

    def latents(
        self, obs: torch.Tensor, starts: torch.Tensor, cuts: list[int], pi: State, vf: State | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's and the critic's inputs to their MLPs over [T, E] sequences."""
        latent_pi, _ = run_lstm(self.lstm_actor, obs, starts, cuts, pi)
        if self.lstm_critic is not None:
            assert vf is not None
            latent_vf, _ = run_lstm(self.lstm_critic, obs, starts, cuts, vf)
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


def lstm_layers_numpy(lstm: nn.LSTM) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each layer's (kernel_ih [in, 4H], kernel_hh [H, 4H], b_ih + b_hh) for the numpy rollout."""
    out = []
    for k in range(lstm.num_layers):
        w_ih = getattr(lstm, f"weight_ih_l{k}").detach().cpu().numpy()
        w_hh = getattr(lstm, f"weight_hh_l{k}").detach().cpu().numpy()
        bias = (getattr(lstm, f"bias_ih_l{k}") + getattr(lstm, f"bias_hh_l{k}")).detach().cpu().numpy()
        out.append((w_ih.T, w_hh.T, bias))
    return out


class LSTMCellActor(nn.Module):
    """The deployable actor: one LSTM step per call, gate by gate, then the actor's MLP. Inputs: the
    normalized observation [1, in], episode_start [1, 1] and per layer h and c [1, H]; outputs the MLP's
    output (logits or the Gaussian's mean) and the next h and c per layer."""

    CELL = LSTM_CELL

    def __init__(self, net: RecurrentActorCritic):
        super().__init__()
        self.layers, self.hidden = net.layers, net.hidden
        self.actor = net.heads.actor
        if not net.discrete:
            self.register_buffer("log_std", net.heads.log_std.detach().clone())
        h = net.hidden
        self.gates = nn.ModuleList()
        for k in range(net.layers):
            w_ih = getattr(net.lstm_actor, f"weight_ih_l{k}").detach()
            w_hh = getattr(net.lstm_actor, f"weight_hh_l{k}").detach()
            bias = (
                getattr(net.lstm_actor, f"bias_ih_l{k}") + getattr(net.lstm_actor, f"bias_hh_l{k}")
            ).detach()
            # one Linear per gate on [x, h]: four FULLY_CONNECTED ops, no Split of a 4H vector
            per_gate = nn.ModuleList()
            for g in range(4):
                rows = slice(g * h, (g + 1) * h)
                lin = nn.Linear(w_ih.shape[1] + h, h)
                lin.weight.data = torch.cat([w_ih[rows], w_hh[rows]], dim=1).clone()
                lin.bias.data = bias[rows].clone()
                per_gate.append(lin)
            self.gates.append(per_gate)

    def state_tensors(self) -> list[tuple[str, int, str]]:
        """(name, size, role) of each state input, in the graph's order."""
        return lstm_state_tensors(self.layers, self.hidden)

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
