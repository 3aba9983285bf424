"""The state an artifact's graph carries from one control cycle to the next (a recurrent cell's h and c, or
h; a frame stack's older observations; a rate limit's previous action; OU noise's process), as the
manifest's `state` section declares it: one rl2edge.specs.StateTensor each (export.graph_spec.state_section
writes it).

The contract: every state tensor is a float32 graph input whose next value is a graph output (explicit
I/O, no hidden variable tensors), and one more input, `episode_start` ([1, 1] float32, 1.0 on an
episode's first call), makes the graph compute `state * (1 - episode_start)` before using it. The reset
is therefore part of the graph that export verified; the runtime also puts the state back to its
initial value, so that `state()` shows what the graph will start from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.errors import BackendError, ManifestError
from rl2edge.specs import StateTensor


class PolicyState:
    """The state a `runtime.Policy` owns: the values of the manifest's state tensors (rl2edge.specs.StateTensor)
    between calls. Falsy when the artifact declares none."""

    def __init__(self, tensors: list[StateTensor], start_input: str | None):
        """`tensors`: the manifest's state tensors, in order; `start_input`: the episode-start input."""
        self.tensors = tuple(tensors)
        self._start_input = start_input
        self._start = np.ones((1, 1), np.float32)
        self._running = np.zeros((1, 1), np.float32)
        self._values: dict[str, np.ndarray] = {}
        self._pending_start = True
        self.reset()

    @classmethod
    def from_manifest(cls, section: Any, backend: Any) -> PolicyState:
        """The manifest's `state` section checked against the model's own extra inputs and outputs."""
        if not section:
            return cls([], None)
        tensors = [StateTensor.from_json(t) for t in section["tensors"]]
        start = str(section["episode_start"]["input"])
        missing = [t.name for t in tensors if t.name not in backend.extra_inputs]
        missing += [t.output for t in tensors if t.output not in backend.extra_outputs]
        if start not in backend.extra_inputs:
            missing.append(start)
        if missing:
            raise ManifestError(
                f"the manifest's state names tensors {missing} that the model does not have; "
                "was the manifest edited, or does it belong to another model?"
            )
        return cls(tensors, start)

    def __bool__(self) -> bool:
        return bool(self.tensors)

    @property
    def inputs(self) -> list[str]:
        """Every graph input the state needs: the state tensors and the episode-start flag."""
        return [t.name for t in self.tensors] + ([self._start_input] if self._start_input else [])

    def reset(self) -> None:
        self._values = {t.name: t.initial_value() for t in self.tensors}
        self._pending_start = True

    def feeds(self) -> dict[str, np.ndarray]:
        """What the next call feeds the graph (the arrays themselves: the interpreter copies them in)."""
        if not self.tensors:
            return {}
        assert self._start_input is not None
        start = self._start if self._pending_start else self._running
        return {**self._values, self._start_input: start}

    def advance(self, extras: dict[str, np.ndarray]) -> None:
        """Take the graph's next state from the call's outputs."""
        values = {t.name: np.asarray(extras[t.output], np.float32).reshape(t.shape) for t in self.tensors}
        bad = [name for name, v in values.items() if not np.isfinite(v).all()]
        if bad:  # fed back, a NaN would stay in the state for the rest of the episode: start afresh
            self.reset()
            raise BackendError(f"the model returned a non-finite state {bad}; the state was reset")
        self._values = values
        self._pending_start = False

    def put(self, name: str, value: np.ndarray) -> None:
        """Set one state tensor's next value (the runtime keeping OU's state while exploration is off)."""
        shape = next(t.shape for t in self.tensors if t.name == name)
        self._values[name] = np.asarray(value, np.float32).reshape(shape)

    def snapshot(self) -> dict[str, np.ndarray]:
        return {name: v.copy() for name, v in self._values.items()}
