"""The torch route: a source's deployable graph as a torch module (export.deployable, with its stateful,
noisy and rate-limited wrappers), written as ONNX (export.onnx_export) and converted to a SavedModel by
onnx2tf (export.tflite_convert)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.export.source import GraphSource


@dataclass
class TorchSource(GraphSource):
    policy: Any = None  # export.deployable.DeployablePolicy
    reference: Callable[[np.ndarray], np.ndarray] | None = None
    """Raw observations -> the source's own actions (SB3's predict); None: the deployable graph."""
    stateful_graph: Any = None
    """A stateful graph other than a recurrent actor's (export.stateful.FrameStackPolicy); None: found from
    the policy's actor."""
    stateful_reference: Any = None
    """A stateful source's own predict with its state (export.sb3.RecurrentReference: `reset()`, a call per
    raw observation row, `trajectory(obs, starts)`); None: the deployable graph."""

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            return self.policy(
                torch.as_tensor(self.policy.from_env_layout(np.asarray(obs, np.float32)))
            ).numpy()

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        import torch

        with torch.no_grad():
            x = torch.as_tensor(self.policy.from_env_layout(np.asarray(obs, np.float32)))
            return self.policy.pre_head(x).numpy()

    def reference_actions(self, obs: np.ndarray) -> np.ndarray:
        return self.deployable_actions(obs) if self.reference is None else np.asarray(self.reference(obs))

    def __post_init__(self) -> None:
        if self.stateful_graph is None and hasattr(getattr(self.policy, "actor", None), "state_tensors"):
            from rl2edge.export.stateful import StatefulPolicy  # a recurrent actor: one cell per call

            self.stateful_graph = StatefulPolicy(self.policy).eval()
        if self.stateful_graph is not None:
            self.states = self.stateful_graph.states
            self.state_cell = self.stateful_graph.cell
            self.reset()

    def cell_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        import torch

        with torch.no_grad():
            out, new = self.stateful_graph.step(
                torch.as_tensor(x), torch.full((1, 1), start), [torch.as_tensor(v) for v in states]
            )
            return self.policy.head_of(out).numpy(), out.numpy(), [v.numpy() for v in new]

    def reset(self) -> None:
        super().reset()
        if self.stateful_reference is not None:
            self.stateful_reference.reset()

    def reference_trajectory(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        if self.stateful_reference is not None:
            own = np.asarray(self.stateful_reference.trajectory(obs, starts))
        elif self.reference is not None and self.rate_limit is not None:
            own = self.reference_actions(obs)  # SB3's predict, then the limit as the graph applies it
        else:
            return super().reference_trajectory(obs, starts)
        if self.rate_limit is None:
            return own
        from rl2edge.export.rate_limit import limit_sequence

        return limit_sequence(own, starts, self.max_step)

    def act(self, obs: Any) -> Any:
        if self.stateful_reference is not None:
            a = self.limit_live(self.stateful_reference(self.observation.flatten(obs).astype(np.float32)))
            return int(a) if self.discrete else a
        if self.reference is None or len(self.cell_states):
            return super().act(obs)
        a = self.limit_live(self.reference_actions(self.observation.flatten(obs).astype(np.float32)[None])[0])
        return int(a) if self.discrete else a

    def _noisy(self) -> Any:
        from rl2edge.export.folded_noise import NoisyPolicy

        assert self.noise is not None, "fold_noise first"
        return NoisyPolicy(self.policy, self.noise).eval()

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]:
        import torch

        start = None if state is None else np.zeros((len(obs), 1), np.float32)  # OU: carried, never reset
        args = [
            torch.as_tensor(np.asarray(a, np.float32)) for a in (obs, noise, start, state) if a is not None
        ]
        with torch.no_grad():
            out = self._noisy()(*args)
        if isinstance(out, tuple):
            return out[0].numpy(), out[1].numpy()
        return out.numpy(), None

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import torch

        with torch.no_grad():
            mean, log_std = self._noisy().distribution(torch.as_tensor(np.asarray(obs, np.float32)))
        return mean.numpy(), log_std.exp().numpy()

    def write_onnx(self, path: Path) -> bool:
        import torch

        from rl2edge.export.folded_noise import example_inputs
        from rl2edge.export.graph_spec import io_names
        from rl2edge.export.onnx_export import export_onnx

        shape = self.policy.input_shape(self.obs_shape)
        graph = self.policy if self.noise is None else self._noisy()
        inputs, outputs = io_names(self.noise)
        examples = example_inputs(self.noise, shape, self.act_dim)
        if self.states:  # obs, episode_start, the states -> action, the next states
            from rl2edge.export.graph_spec import state_io_names

            state_in, state_out = state_io_names(self.states)
            inputs, outputs = [inputs[0], *state_in], [outputs[0], *state_out]
            if self.stateful_graph is not None:
                graph, examples = self.stateful_graph, self.stateful_graph.example_inputs(shape)
            else:
                examples = (*examples, torch.zeros((1, 1)))
            if self.rate_limit is not None:
                from rl2edge.export.rate_limit import torch_rate_limited

                graph = torch_rate_limited(graph, self.max_step, stateful=self.stateful_graph is not None)
                examples = (*examples, torch.zeros((1, self.act_dim)))
        if self.observation.is_dict:  # one input per key in place of `obs`
            from rl2edge.export.deployable import KeyedInputs

            keys = self.observation.keys
            graph = KeyedInputs(graph, len(keys))
            examples = (*(torch.zeros((1, k.size)) for k in keys), *examples[1:])
            inputs = [k.name for k in keys] + inputs[1:]
        export_onnx(graph, shape, path, examples, inputs, outputs)
        return True

    def onnx_input(self, obs: np.ndarray) -> np.ndarray:
        return self.policy.from_env_layout(obs)

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        from rl2edge.export.tflite_convert import onnx_to_saved_model

        assert onnx_path is not None
        return onnx_to_saved_model(onnx_path, work / "saved_model")
