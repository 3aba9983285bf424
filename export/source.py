"""What an export starts from: an rl2edge checkpoint (torch or tf; export.checkpoint_source), or a
Stable-Baselines3 model (.zip) with its VecNormalize statistics (export.sb3). Every source gives the
pipeline the same things: the deterministic policy on raw observations (for rollouts), the reference
actions exported files are checked against, the I/O specs, the folded normalizer and head, the manifest's
`source` section, and the graph as ONNX (torch sources) and as a TF SavedModel. This module holds the
base class and the torch one; export.tf_source the TF one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ExportError
from rl2edge.export.rate_limit import RateLimit
from rl2edge.specs import ActionSpec, NoiseSpec, ObservationSpec, StateTensor
from rl2edge.train.core.normalization import RunningNormalizer


@dataclass
class ExportSource:
    env_id: str
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
    rate_limit: RateLimit | None = None
    """The action-rate limit folded after the policy (its state `prev_action` last in `states`); set with
    `limit_rate`."""

    def fold_noise(self, spec: NoiseSpec) -> None:
        from rl2edge.export.graph_spec import check_noise_fits

        if self.states:
            raise ExportError(
                f"--noise: folding exploration noise into a stateful graph ({self.algo}) is not implemented; "
                "export without --noise"
            )
        check_noise_fits(spec, self.head, self.discrete, self.policy_distribution, self.algo)
        self.noise = spec

    def limit_rate(self, spec: RateLimit) -> None:
        """Fold an action-rate limit after the policy (export.rate_limit): one more state, `prev_action`."""
        from rl2edge.export.rate_limit import PREV_ACTION, RATE_LIMIT_CELL

        if self.discrete:
            raise ExportError(
                "--max-action-rate limits how fast a Box action moves; this policy's action is Discrete. "
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
        actions, pre, fed = [], [], {t.name: [] for t in self.states}
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
        """Discrete: the gap between the top two logits/Q-values (near ties may flip in any conversion)."""
        if not self.discrete:
            return None
        top2 = np.sort(self.pre_head(obs), axis=-1)[:, -2:]
        return top2[:, 1] - top2[:, 0]

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


@dataclass
class TorchSource(ExportSource):
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
