"""Plants of the conformance matrix (benchmarks/env_matrix.py) that need a line of glue around a
third-party env, as a user's own module would hold it, and a multi-valve plant.

- `MemoryFlat-v0`: MiniGrid's MemoryS7 (a memory task: remember the object seen at the start) with the
  agent's 7x7 symbolic view flattened, as MiniGrid's own `ImgObsWrapper` and Gymnasium's
  `FlattenObservation` give it: a Box of 147 values, the direction and the mission text left out.
- `ThreeValves`: three on/off valves filling a tank to a setpoint, a MultiDiscrete([2, 2, 2]) action;
  `ThreeValvesBinary` the same plant with a MultiBinary(3) action, `ValveAndPump` one on/off valve and a
  pump switch of three speeds numbered from 1 (MultiDiscrete([2, 3], start=[0, 1]))."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def memory_flat(**kwargs: Any) -> gym.Env:
    import minigrid  # noqa: F401  (registers MiniGrid's ids)
    from minigrid.wrappers import ImgObsWrapper

    return gym.wrappers.FlattenObservation(ImgObsWrapper(gym.make("MiniGrid-MemoryS7-v0", **kwargs)))


if "MemoryFlat-v0" not in gym.registry:
    gym.register("MemoryFlat-v0", entry_point=f"{__name__}:memory_flat")


class ThreeValves(gym.Env):
    """A tank fed by three valves of 1, 2 and 4 units a step, drained by 3.5 a step; reward: minus the
    distance of the level from the setpoint. 100 steps."""

    metadata = {"render_modes": []}  # noqa: RUF012
    FLOWS = np.array([1.0, 2.0, 4.0])

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 100.0, (2,), np.float32)  # level, setpoint
        self.action_space = gym.spaces.MultiDiscrete([2, 2, 2])
        self._level, self._setpoint, self._t = 0.0, 0.0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self._level, self._setpoint], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._level = float(self.np_random.uniform(20, 80))
        self._setpoint = float(self.np_random.uniform(20, 80))
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self._level = float(np.clip(self._level + self.FLOWS @ np.asarray(action) - 3.5, 0.0, 100.0))
        self._t += 1
        return self._obs(), -abs(self._level - self._setpoint), False, self._t >= 100, {}


class ThreeValvesBinary(ThreeValves):
    """ThreeValves with a MultiBinary(3) action (one Boolean per valve)."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.MultiBinary(3)


class ValveAndPump(ThreeValves):
    """The tank fed by a valve of 1 unit a step and a pump of speed 1, 2 or 3 (2 units a step each):
    MultiDiscrete([2, 3], start=[0, 1]), the pump's speeds numbered from 1 as on its selector switch."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.MultiDiscrete([2, 3], start=[0, 1])

    def step(self, action: Any) -> Any:
        valve, speed = (int(v) for v in np.asarray(action))
        assert valve in (0, 1) and speed in (1, 2, 3), f"action {action} outside the space"
        self._level = float(np.clip(self._level + valve + 2.0 * speed - 4.5, 0.0, 100.0))
        self._t += 1
        return self._obs(), -abs(self._level - self._setpoint), False, self._t >= 100, {}
