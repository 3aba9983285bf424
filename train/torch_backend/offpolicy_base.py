"""What the torch off-policy agents share: device and seeding, the tensor boundary, learning-rate
updates over all optimizers, weights in memory and on disk (safetensors, no pickle)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.errors import ConfigError
from rl2edge.train.core.numpy_actor import NumpyActor, Sampler
from rl2edge.train.core.numpy_policy import Layers
from rl2edge.train.core.offpolicy_agent import OffPolicyAgentBase
from rl2edge.train.core.replay import ReplayBatch
from rl2edge.train.torch_backend.graph_adam import GraphAdam
from rl2edge.train.torch_backend.matmul_precision import training_phase
from rl2edge.train.torch_backend.mlp_grad import ensure_grads
from rl2edge.train.torch_backend.setup import setup_torch
from rl2edge.train.torch_backend.weights import save_safetensors, state_copy


class TorchOffPolicyBase(OffPolicyAgentBase):
    framework = "torch"
    stat_names: tuple[str, ...] = ()
    matmul_precision = "highest"  # of the training phases (train --matmul-precision sets it)
    policy_distribution = False
    """Whether the exported actor has a distribution that `--noise policy` samples (export.graph_spec)."""

    def __init__(self, seed: int, device: str):
        dev = setup_torch(seed, device)
        self.dev, self.device = dev, str(dev)
        self.nets = nn.ModuleDict()  # every network, targets included: what is saved and restored
        self.optimizers: list[torch.optim.Optimizer] = []
        self.seed = seed
        # an actor agent on a CPU explores through a numpy copy of the actor (train.core.numpy_actor)
        self.explorer: NumpyActor | None = None
        self.graph_adams: list[GraphAdam] = []  # train --compile: the optimizers' traceable steps
        self.compiled = False

    def numpy_explorer(self, activation: str, layers: list[nn.Linear], sample: Sampler) -> NumpyActor | None:
        """The numpy actor over views of `layers`' parameters (the last `sample.n_heads` are the heads),
        sampling with `sample`, or None off the CPU, where the weights would cross to the host every step. The optimizers
        and the polyak and state updates write the parameters in place, so the views stay current;
        set_state invalidates them all the same."""
        if self.dev.type != "cpu":
            return None

        def load() -> Layers:
            return [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in layers]

        return NumpyActor(activation, load, sample)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The behaviour action before the driver's noise: the numpy actor where there is one."""
        if self.explorer is not None:
            return self.explorer.act(obs)
        return self.framework_explore(obs)

    def framework_explore(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _t(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.dev)

    def adam(self, params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
        opt = torch.optim.Adam(params, lr=lr, fused=self.dev.type in ("cpu", "cuda"))
        self.optimizers.append(opt)
        return opt

    def set_learning_rate(self, lr: float) -> None:
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = lr
        for graph_adam in self.graph_adams:
            graph_adam.sync_lr()

    # ----------------------------------------------------------------------- train --compile
    def compile_update(self) -> None:
        """`train --compile`: the written-out gradient step as torch.compile graphs (fullgraph, static
        shapes), each optimizer's Adam step inside them (train.torch_backend.graph_adam); what depends on
        a Python counter (TD3's policy delay, SAC's target interval) stays outside, so each graph is
        traced once (tests/test_compile.py counts them). Each agent names its graphs in `_compile`."""
        if type(self)._compile is TorchOffPolicyBase._compile:  # before any change to the agent
            raise NotImplementedError(f"{type(self).__name__} has no compiled update")
        if not getattr(self, "written_out", True):
            raise ConfigError(
                "train --compile compiles the written-out gradient step, which a network with image keys "
                "(a Nature-CNN) does not have: train it without --compile"
            )
        self.graph_adams = []
        for opt in self.optimizers:
            ensure_grads(opt.param_groups[0]["params"])  # the graph writes into them: none made inside
        self._compile()
        self.compiled = True

    def graph_adam_step(self, opt: torch.optim.Optimizer) -> Callable[[], None]:
        """`opt`'s step as the compiled graph runs it (its learning rate synced by set_learning_rate)."""
        graph_adam = GraphAdam(opt)
        self.graph_adams.append(graph_adam)
        return graph_adam.step

    @staticmethod
    def compiled_graph(fn: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(fn, fullgraph=True, dynamic=False)

    def _compile(self) -> None:
        raise NotImplementedError

    def update_target(self) -> None:
        """Only DQN has a target updated on a period (train.core.dqn_hooks: after_env_step)."""

    def parts(self) -> dict[str, nn.Module]:
        """The agent's networks by the names both backends use (actor, critic, critic_target, q, ...)."""
        raise NotImplementedError

    def variables(self, part: str) -> list[np.ndarray]:
        """Copies of a part's weights, in the order of its layers: what tests compare across backends."""
        return [p.detach().cpu().numpy().copy() for p in self.parts()[part].parameters()]

    def get_state(self) -> dict[str, torch.Tensor]:
        return state_copy(self.nets)

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        self.nets.load_state_dict(state)
        if self.explorer is not None:
            self.explorer.invalidate()

    def save_weights(self, run_dir: Path) -> str:
        return save_safetensors(self.nets, run_dir)

    def train_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        dones: torch.Tensor,
    ) -> torch.Tensor:
        """One gradient step on one batch; the stat_names values as a tensor (NaN where not computed)."""
        raise NotImplementedError

    def train(self, batch: ReplayBatch) -> np.ndarray:
        t = [self._t(x) for x in (batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.dones)]
        # no explorer.invalidate() here: its views see the in-place updates, so remaking them each phase
        # would cost time for nothing
        with training_phase(self.matmul_precision):  # subnormals flushed, the run's precision
            rows = [self.train_step(*(x[i] for x in t)) for i in range(batch.n)]
        return torch.stack(rows).nanmean(0).cpu().numpy()  # one host sync per training phase
