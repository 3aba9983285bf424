"""The deployable graphs of stateful policies, in torch: the stateless graph's normalization and head around
an actor that takes and returns state (a recurrent actor's one-step cell, train.torch_backend.recurrent_nets),
or around a frame stack whose older observations are the state (train.core.frame_stack).

Inputs: obs, episode_start [1, 1], then each state tensor [1, size]; outputs: action, then each state's
next value, named as export.graph_spec.state_io_names says. The actor multiplies every state input by
(1 - episode_start) before using it: the reset is inside the graph that export verifies.
"""

from __future__ import annotations

import torch
from torch import nn

from rl2edge.export.deployable import DeployablePolicy
from rl2edge.specs import FRAME_STACK_CELL, frame_stack_state


class StatefulPolicy(nn.Module):
    def __init__(self, base: DeployablePolicy):
        super().__init__()
        self.base = base
        self.states = base.actor.state_tensors()
        self.cell = base.actor.CELL

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
            *(torch.from_numpy(t.initial_value()) for t in self.states),
        )


class FrameStackPolicy(nn.Module):
    """A policy trained on the last K observations (`base` takes their concatenation), served one
    observation per call: the K-1 previous ones are the state `frames` [1, (K-1) * dim]."""

    def __init__(self, base: DeployablePolicy, dim: int, k: int):
        super().__init__()
        self.base, self.dim, self.k = base, dim, k
        self.states = [frame_stack_state(dim, k)]
        self.cell = FRAME_STACK_CELL

    def step(
        self, obs: torch.Tensor, episode_start: torch.Tensor, states: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        stacked = torch.cat([states[0] * (1.0 - episode_start), obs.reshape(1, -1)], dim=-1)
        return self.base.pre_head(stacked), [stacked[:, self.dim :]]

    def forward(
        self, obs: torch.Tensor, episode_start: torch.Tensor, frames: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        out, new = self.step(obs, episode_start, [frames])
        return self.base.head_of(out), new[0]

    def example_inputs(self, obs_shape: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
        return torch.zeros((1, self.dim)), torch.zeros((1, 1)), torch.zeros((1, (self.k - 1) * self.dim))
