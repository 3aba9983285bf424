"""What the TF off-policy agents share: seeding, optimizers, and the compiled functions.

Graph discipline, as in TF PPO: every compiled function has an `input_signature` (None only for sizes
that really vary: the number of stacked batches, the batch size); the driver's Python numbers cross
into graphs only as tensors or variables; counters (TD3's critic steps) are tf.Variables read and
incremented inside the graph; target updates are variable assignments inside the same graph; sampling
draws from one tf.random.Generator seeded once. `trace_counts()` reports how often each function traced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.train.core.numpy_actor import NumpyActor, Sampler
from rl2edge.train.core.offpolicy_agent import OffPolicyAgentBase
from rl2edge.train.core.replay import ReplayBatch
from rl2edge.train.tf_backend.setup import configure_tensorflow
from rl2edge.train.tf_backend.weights import save_keras_weights, state_copy


class TFOffPolicyBase(OffPolicyAgentBase):
    framework = "tf"
    stat_names: tuple[str, ...] = ()
    nets: Any
    policy_distribution = False
    """Whether the exported actor has a distribution that `--noise policy` samples (export.graph_spec)."""

    def __init__(self, seed: int, device: str):
        self.device = configure_tensorflow(device)
        import keras
        import tensorflow as tf

        self.tf, self.keras = tf, keras
        keras.utils.set_random_seed(seed)  # once, before any initializer draws
        self.rng = tf.random.Generator.from_seed(seed)  # the one generator that sampling draws from
        self.optimizers: list[Any] = []
        self.seed = seed
        # an actor agent on a CPU explores through a numpy copy of the actor (train.core.numpy_actor)
        self.explorer: NumpyActor | None = None
        self._explorer_vars: list[Any] = []  # what the training phase's graph returns for it
        self._explorer_values: np.ndarray | None = None

    def numpy_explorer(self, activation: str, variables: list[Any], sample: Sampler) -> NumpyActor | None:
        """The numpy actor over the actor's Dense `variables` (kernel, bias, ... in layer order; the last
        `sample.n_heads` layers are the heads), sampling with `sample`, or None off the CPU. Call before
        compile(): the training phase's graph returns these variables' values with its stats (one tensor,
        one copy), because reading the variables one by one would cost more than the numpy actor's forward
        pass."""
        if self.device != "cpu":
            return None
        if hasattr(self, "_train_many"):
            raise RuntimeError(
                "numpy_explorer() after compile(): the training graph would not return its weights"
            )
        self._explorer_vars = list(variables)
        shapes = [tuple(v.shape) for v in variables]
        sizes = [int(np.prod(s)) for s in shapes]

        def load() -> list[tuple[np.ndarray, np.ndarray]]:
            flat = self._explorer_values
            if flat is None:  # before the first training phase, or after set_state
                values = [v.numpy() for v in variables]
            else:
                parts = np.split(flat, np.cumsum(sizes)[:-1])
                values = [a.reshape(s) for a, s in zip(parts, shapes, strict=True)]
            return list(zip(values[0::2], values[1::2], strict=True))

        return NumpyActor(activation, load, sample)

    def adam(self, variables: list[Any], lr: float) -> Any:
        opt = self.keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)  # torch's eps, as SB3
        opt.build(variables)
        self.optimizers.append(opt)
        return opt

    def compile(self, obs_dim: int, act_dim: int, discrete: bool) -> None:
        """Trace the agent's functions once, with fixed signatures."""
        tf = self.tf
        obs = tf.TensorSpec([None, obs_dim], tf.float32)
        stacked_obs = tf.TensorSpec([None, None, obs_dim], tf.float32)
        stacked_act = (
            tf.TensorSpec([None, None], tf.int64)
            if discrete
            else tf.TensorSpec([None, None, act_dim], tf.float32)
        )
        vec = tf.TensorSpec([None, None], tf.float32)
        self._deterministic = tf.function(self.deterministic_graph, input_signature=[obs])
        self._explore = tf.function(self.explore_graph, input_signature=[obs])
        self._train_signature = [stacked_obs, stacked_act, vec, stacked_obs, vec]
        self._train_many = tf.function(self.train_phase_graph, input_signature=self._train_signature)
        self._update_target = tf.function(self.update_target_graph, input_signature=[])
        # The per-step calls go to concrete functions: the same single trace, without tf.function's
        # per-call signature matching.
        self._deterministic_cf = self._deterministic.get_concrete_function()
        self._explore_cf = self._explore.get_concrete_function()
        self._train_many_cf = self._train_many.get_concrete_function()

    def compile_update(self) -> None:
        """`train --compile`: the training phase as one XLA computation (jit_compile), as TF's PPO and A2C
        always run theirs; called before the first training phase (the function then traces once, as XLA).
        Off by default because on a CPU it does not pay: XLA's own matmuls replace oneDNN's, and the
        gradient step is no faster than the plain graph's. It is there for GPUs, where fusing the step's
        many small ops into a few kernels is what XLA is for; not measured on one yet.
        The graph that compile() traced is replaced (trace_counts reports the XLA function's traces); XLA
        compiles once per shape of the stacked batches, which a run keeps fixed."""
        tf = self.tf
        self._train_many = tf.function(
            self.train_phase_graph, input_signature=self._train_signature, jit_compile=True
        )
        self._train_many_cf = self._train_many.get_concrete_function()

    # ------------------------------------------------------------------ graphs (subclasses fill in)
    def deterministic_graph(self, obs: Any) -> Any:
        raise NotImplementedError

    def explore_graph(self, obs: Any) -> Any:
        return self.deterministic_graph(obs)

    def train_step_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        raise NotImplementedError

    def update_target_graph(self) -> Any:
        return self.tf.constant(0)

    def train_phase_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        """A training phase: its stats, and the explorer's variables after it as one flat tensor (empty
        without an explorer). Read after the loop's updates: tf.function runs stateful ops on the same
        variables in program order."""
        tf = self.tf
        stats = self.train_many_graph(obs, actions, rewards, next_obs, dones)
        if not self._explorer_vars:
            return stats, tf.zeros([0])
        return stats, tf.concat([tf.reshape(v, [-1]) for v in self._explorer_vars], axis=0)

    def train_many_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        """All stacked batches, one gradient step each, in one call; the stats' mean over the finite values."""
        tf = self.tf
        n = tf.shape(obs)[0]
        stats = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            stats = stats.write(
                i, self.train_step_graph(obs[i], actions[i], rewards[i], next_obs[i], dones[i])
            )
        rows = stats.stack()
        finite = tf.math.is_finite(rows)
        total = tf.reduce_sum(tf.where(finite, rows, tf.zeros_like(rows)), axis=0)
        return total / tf.reduce_sum(tf.cast(finite, tf.float32), axis=0)  # NaN where no step had a value

    # ------------------------------------------------------------------------------ agent API
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self._deterministic_cf(self.tf.constant(obs)).numpy()

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The behaviour action before the driver's noise: the numpy actor where there is one."""
        if self.explorer is not None:
            return self.explorer.act(obs)
        return self.framework_explore(obs)

    def framework_explore(self, obs: np.ndarray) -> np.ndarray:
        return self._explore_cf(self.tf.constant(obs)).numpy()

    def train(self, batch: ReplayBatch) -> np.ndarray:
        stats, actor = self._train_many_cf(
            self.tf.constant(batch.obs),
            self.tf.constant(batch.actions),
            self.tf.constant(batch.rewards),
            self.tf.constant(batch.next_obs),
            self.tf.constant(batch.dones),
        )
        if self.explorer is not None:
            self._explorer_values = actor.numpy()
            self.explorer.invalidate()
        return stats.numpy()

    def update_target(self) -> None:
        self._update_target()

    def set_learning_rate(self, lr: float) -> None:
        for opt in self.optimizers:
            opt.learning_rate.assign(lr)  # a variable: the graph reads it, no retrace

    def compiled(self) -> dict[str, Any]:
        """The agent's compiled functions by name (what trace_counts reports)."""
        return {
            "deterministic": self._deterministic,
            "explore": self._explore,
            "train_many": self._train_many,
            "update_target": self._update_target,
        }

    def trace_counts(self) -> dict[str, int]:
        return {name: fn.experimental_get_tracing_count() for name, fn in self.compiled().items()}

    def parts(self) -> dict[str, list[Any]]:
        """The agent's networks by the names both backends use (actor, critic, critic_target, q, ...)."""
        raise NotImplementedError

    def variables(self, part: str) -> list[np.ndarray]:
        """Copies of a part's weights, in the order of its layers: what tests compare across backends."""
        return [v.numpy().copy() for v in self.parts()[part]]

    def get_state(self) -> list[np.ndarray]:
        return state_copy(self.nets)

    def set_state(self, state: list[np.ndarray]) -> None:
        self.nets.set_weights(state)
        if self.explorer is not None:
            self._explorer_values = None
            self.explorer.invalidate()

    def save_weights(self, run_dir: Path) -> str:
        return save_keras_weights(self.nets, run_dir)
