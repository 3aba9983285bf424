"""The deployable graph of a stateful policy, in torch: the stateless graph's normalization and head around
an actor that takes and returns state (a recurrent actor's one-step cell, train.torch_backend.recurrent_nets).

Inputs: obs, episode_start [1, 1], then each state tensor [1, size]; outputs: action, then each state's
next value, named as export.graph_spec.state_io_names says. The actor multiplies every state input by
(1 - episode_start) before using it: the reset is inside the graph that export verifies.
"""

from __future__ import annotations

import torch
from torch import nn

from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.graph_spec import StateTensor


class StatefulPolicy(nn.Module):
    def __init__(self, base: DeployablePolicy):
        super().__init__()
        self.base = base
        self.states = [StateTensor(n, s, r) for n, s, r in base.actor.state_tensors()]

    def step(
        self, obs: torch.Tensor, episode_start: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(the network's output before the head, the next states)."""
        return self.base.actor.step(self.base.normalized(obs), episode_start, states)

    def forward(
        self, obs: torch.Tensor, episode_start: torch.Tensor, *states: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        out, new = self.step(obs, episode_start, list(states))
        return (self.base.head_of(out), *new)

    def example_inputs(self, obs_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        return (
            torch.zeros((1, *obs_shape)),
            torch.zeros((1, 1)),
            *(torch.zeros((1, t.size)) for t in self.states),
        )
