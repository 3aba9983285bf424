"""What an export starts from, as the pipeline (export.pipeline) sees it: the `ExportSource` contract.

A source is a policy trained somewhere, with what it needs folded around it: its observation and action
specs, the normalizer and the action head, its state tensors (rl2edge.specs.StateTensor), a reference that
acts on raw observations in the source's own runtime (what every exported file is checked against), the
graph as ONNX and/or as a TF SavedModel, and the manifest's `source` section saying where it came from.

Sources live in export/sources/, one module each, and are chosen in export/sources/__init__.py by what the
path holds. Most build on `GraphSource` below (the state, noise and rate-limit folding every route shares)
and one route: export.torch_graph (torch module -> ONNX -> onnx2tf -> SavedModel) or export.tf_graph (a
tf.Module saved as a SavedModel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rl2edge.errors import ExportError
from rl2edge.export.rate_limit import RateLimit
from rl2edge.specs import ActionSpec, NoiseSpec, ObservationSpec, StateTensor
from rl2edge.train.core.normalization import RunningNormalizer


class ExportSource(Protocol):
    """What the export pipeline takes from a source, and all it takes."""

    # ---- what the policy is: the specs, the folded normalization and head, the state
    env_id: str | None
    """The Gymnasium env the closed-loop returns are measured in; None: none (recorded observations only)."""
    observation: ObservationSpec
    action: ActionSpec
    norm: RunningNormalizer
    """The observation normalization folded into the graph (disabled: none, or already inside it)."""
    normalized_inside: bool
    """The source's own graph normalizes its input (a file trained elsewhere that carries its normalizer)."""
    head: str
    """The action head (export.graph_spec.HEADS)."""
    states: list[StateTensor]
    """The graph's state tensors, in its input order; empty for a stateless graph."""
    state_cell: str
    """What the graph computes with its state, for the manifest."""
    noise: NoiseSpec | None
    rate_limit: RateLimit | None

    # ---- where it came from
    description: dict[str, Any]
    """The manifest's `source` section: the kind of file, its sha256, what was read from it."""
    reference_name: str
    """How the report names what the exported files are compared with."""

    @property
    def discrete(self) -> bool:
        """One Discrete index."""

    @property
    def categorical(self) -> bool:
        """Integer actions of argmax heads: Discrete, or MultiDiscrete (`nvec`, one index per component)."""

    @property
    def nvec(self) -> tuple[int, ...] | None: ...

    flat_frames: bool
    """The graph takes an image observation's values flat, in the env's own order (rl2edge's own image-Box
    checkpoints, whose Nature-CNN encoder reshapes them); False: in its shape, or no image."""

    @property
    def act_dim(self) -> int: ...

    # ---- options folded into the graph (each refuses, with the reason, what the source cannot carry)
    def fold_noise(self, spec: NoiseSpec) -> None: ...

    def limit_rate(self, spec: RateLimit) -> None: ...

    # ---- the reference, in the source's own runtime, on raw observations
    def act(self, obs: Any) -> Any:
        """One raw observation -> one env action (rollouts); a stateful source carries its state."""

    def reset(self) -> None:
        """A new episode for `act`."""

    def reference_actions(self, obs: np.ndarray) -> np.ndarray:
        """A stateless source's actions on a batch of flat raw observations."""

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        """Categorical: a stateless source's logits or Q-values on a batch (what its head picks from)."""

    def margins(self, obs: np.ndarray) -> np.ndarray | None:
        """Discrete: the gap between the top two logits/Q-values at each observation; None for Box."""

    def trajectory(self, obs: np.ndarray, starts: np.ndarray) -> Trajectory:
        """A stateful source's graph over whole episodes, state carried, reset where `starts`."""

    def reference_trajectory(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """What a stateful source's exported files must reproduce over whole episodes."""

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        """The deployable graph itself on a batch (the folded-noise checks compare with it)."""

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]: ...

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    # ---- the graph, written for the converter
    def write_onnx(self, path: Path) -> bool:
        """Write the graph as ONNX; False where the route has none (the TF route)."""

    def onnx_input(self, obs: np.ndarray) -> np.ndarray:
        """A batch of env observations in the ONNX graph's input layout."""

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        """The graph as a TF SavedModel under `work`, what the TFLite converter takes."""


@dataclass
class GraphSource:
    """The shared half of every source: its specs and the graph's state, noise and rate limit, folded in
    the same way for every route. A route (export.torch_graph, export.tf_graph) adds how its framework
    runs and writes the graph; a source module fills in the specs and the description."""

    env_id: str | None
    observation: ObservationSpec
    action: ActionSpec
    norm: RunningNormalizer
    head: str
    description: dict[str, Any]
    """The manifest's `source` section."""
    reference_name: str
    """How the report names what exported files are compared with."""
    algo: str = ""
    """The source's algorithm, as error messages name it."""
    policy_distribution: bool = False
    """Whether the policy has a distribution that `--noise policy` samples (the agent class says so)."""
    noise: NoiseSpec | None = None
    """The noise folded into the graph, or None; set with `fold_noise`."""
    states: list[StateTensor] = field(default_factory=list)
    """The graph's state tensors (a recurrent policy's h and c); empty for a stateless graph."""
    state_cell: str = ""
    """What the graph computes with its state, for the manifest."""
    normalized_inside: bool = False
    """The source's own graph normalizes its input (`norm` then disabled)."""
    rate_limit: RateLimit | None = None
    """The action-rate limit folded after the policy (its state `prev_action` last in `states`); set with
    `limit_rate`."""
    flat_frames: bool = False
    """The graph takes an image observation's values flat, in the env's own order (rl2edge's own image-Box
    checkpoints); False: in its shape (NCHW for an SB3 CnnPolicy), or no image."""

    def fold_noise(self, spec: NoiseSpec) -> None:
        from rl2edge.export.graph_spec import check_noise_fits

        if self.states:
            raise ExportError(
                f"--noise: folding exploration noise into a stateful graph ({self.algo}) is not implemented; "
                "export without --noise"
            )
        check_noise_fits(spec, self.head, self.categorical, self.policy_distribution, self.algo)
        self.noise = spec

    def limit_rate(self, spec: RateLimit) -> None:
        """Fold an action-rate limit after the policy (export.rate_limit): one more state, `prev_action`."""
        from rl2edge.export.rate_limit import PREV_ACTION, RATE_LIMIT_CELL

        if self.categorical:
            raise ExportError(
                f"--max-action-rate limits how fast a Box action moves; this policy's action is {self.action.space_name}. "
                "Export without it"
            )
        if self.noise is not None:
            raise ExportError("--max-action-rate with --noise is not implemented; export with one of them")
        if self.observation.layout != "flat":
            raise ExportError(
                "--max-action-rate is implemented for vector observations; image policies export without it"
            )
        spec.max_step(self.act_dim)  # checks the number of rates
        self.rate_limit = spec
        self.states = [
            *self.states,
            StateTensor.row(PREV_ACTION, self.act_dim, "the previous action, in action units"),
        ]
        self.state_cell = f"{self.state_cell}; then {RATE_LIMIT_CELL}" if self.state_cell else RATE_LIMIT_CELL
        self.reset()

    @property
    def max_step(self) -> np.ndarray:
        """The rate limit's largest change per call [1, act_dim]."""
        assert self.rate_limit is not None
        return self.rate_limit.max_step(self.act_dim)

    @property
    def cell_states(self) -> list[StateTensor]:
        """The policy's own state tensors, without the rate limit's."""
        return self.states[:-1] if self.rate_limit is not None else self.states

    def reset(self) -> None:
        """A new episode for `act` (a stateful source's state back to zero); nothing for a stateless one."""
        if self.states:
            self._live = [t.initial_value() for t in self.states]
            self._live_start = 1.0

    def state_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """A stateful graph's one step in its source framework on one raw observation row [1, n]: (the
        action [1, ...], the output before the head [1, m], the next states), the rate limit last."""
        n = len(self.cell_states)
        if n:
            action, out, new = self.cell_step(x, start, states[:n])
        else:  # a stateless policy with a rate limit
            action, out, new = self.deployable_actions(x), self.pre_head(x), []
        if self.rate_limit is not None:
            from rl2edge.export.rate_limit import limit_step

            action = limit_step(action, states[n], start, self.max_step)
            new = [*new, action.copy()]
        return action, out, new

    def cell_step(
        self, x: np.ndarray, start: float, states: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """The policy's own cell (a recurrent actor, a frame stack), as `state_step` without a rate limit."""
        raise NotImplementedError

    def reference_trajectory(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """What a stateful source's exported files must reproduce over whole episodes: its own graph's
        actions unless a source says otherwise (sb3-contrib's predict with its state carried)."""
        return self.trajectory(obs, starts).actions

    def limit_live(self, action: Any) -> Any:
        """`act`'s action from a source's own reference (SB3's predict), through the rate limit with the
        live previous action; unchanged without one."""
        if self.rate_limit is None:
            return action
        from rl2edge.export.rate_limit import limit_step

        limited = limit_step(
            np.asarray(action, np.float32)[None], self._live[-1], self._live_start, self.max_step
        )
        self._live[-1], self._live_start = limited, 0.0
        return limited[0]

    def trajectory(self, obs: np.ndarray, starts: np.ndarray) -> Trajectory:
        """A stateful graph in its source framework over whole episodes in order, the state carried and
        reset where `starts` is True."""
        states = [t.initial_value() for t in self.states]
        actions: list[np.ndarray] = []
        pre: list[np.ndarray] = []
        fed: dict[str, list[np.ndarray]] = {t.name: [] for t in self.states}
        for x, start in zip(np.asarray(obs, np.float32), starts, strict=True):
            for t, v in zip(self.states, states, strict=True):
                fed[t.name].append(v[0])
            a, out, states = self.state_step(x[None], float(start), states)
            actions.append(a[0])
            pre.append(out[0])
        return Trajectory(np.stack(actions), np.stack(pre), {k: np.stack(v) for k, v in fed.items()})

    @property
    def act_dim(self) -> int:
        return self.action.size

    def noisy_actions(
        self, obs: np.ndarray, noise: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, Any]:
        """The noisy graph in its source framework: (actions, next OU state or None)."""
        raise NotImplementedError

    def distribution(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The policy's own Gaussian at these observations: (mean, std), before any squashing."""
        raise NotImplementedError

    @property
    def discrete(self) -> bool:
        return self.action.discrete

    @property
    def categorical(self) -> bool:
        return self.action.categorical

    @property
    def nvec(self) -> tuple[int, ...] | None:
        return self.action.nvec if self.action.multi_discrete else None

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return self.observation.shape

    def deployable_actions(self, obs: np.ndarray) -> np.ndarray:
        """The deployable graph in its source framework, on a batch of raw observations."""
        raise NotImplementedError

    def pre_head(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def reference_actions(self, obs: np.ndarray) -> np.ndarray:
        """What exported files must reproduce; the deployable graph itself unless a source says otherwise."""
        return self.deployable_actions(obs)

    def act(self, obs: Any) -> Any:
        """One raw observation (a Dict env's: a mapping) -> one env action, for rollouts; a stateful
        source carries its state from call to call (`reset` at an episode's start)."""
        if self.states:
            x = self.observation.flatten(obs).astype(np.float32)[None]
            a, _, self._live = self.state_step(x, self._live_start, self._live)
            self._live_start = 0.0
            return int(a[0]) if self.discrete else a[0]
        a = self.deployable_actions(self.observation.flatten(obs).astype(np.float32)[None])[0]
        return int(a) if self.discrete else a

    def margins(self, obs: np.ndarray) -> np.ndarray | None:
        """Categorical: the gap between the top two logits/Q-values (near ties may flip in any conversion);
        per component for a multi-discrete action, the smallest."""
        if not self.categorical:
            return None
        from rl2edge.export.verify import top2_margins

        return top2_margins(self.pre_head(obs), self.nvec)

    def write_onnx(self, path: Path) -> bool:
        """Write the graph as ONNX; False where the source has no ONNX route."""
        return False

    def write_saved_model(self, work: Path, onnx_path: Path | None) -> Path:
        raise NotImplementedError

    def onnx_input(self, obs: np.ndarray) -> np.ndarray:
        """A batch of env observations in the ONNX graph's input order."""
        return obs


@dataclass(frozen=True)
class Trajectory:
    """What a stateful graph did over a sequence: per step the action, the output before the head, and
    the value each state input was fed (by name)."""

    actions: np.ndarray
    pre_head: np.ndarray
    fed: dict[str, np.ndarray]
