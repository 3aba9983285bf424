"""A warehouse AGV: a unicycle vehicle driving to a goal station between racks and moving forklifts.

One plant core (`AgvPlant`) and two observation variants of it, both constructed without arguments as
rl2edge makes every env:

- `AgvDictEnv`: a `Dict` observation with the keys lidar, imu, goal, speed, in that order;
- `AgvFlatEnv`: the same plant, the same values, one flat `Box` of 30 components, the keys concatenated
  in the order of `FLAT_KEYS` (lidar 0-23, imu 24-25, goal 26-28, speed 29).

Sensors, in SI units:
    lidar  m       24 beams, beam k at k * 15 deg counter-clockwise from the vehicle's heading, 0 .. 8 m,
                   Gaussian noise (sigma 0.02 m); a beam drops out (reads 8 m) with probability 0.02
    imu    m/s2, rad/s   measured forward acceleration and yaw rate, with small noise
    goal   m, -, - the goal station in the vehicle frame: distance, cos(bearing), sin(bearing)
    speed  m/s     the measured forward speed
Action: a Box of two components in physical units, commanded forward speed [-0.5, 1.5] m/s and yaw rate
[-1, 1] rad/s; the drive follows through a first-order lag (0.2 s) under acceleration limits.
Reward: the decrease in distance to the goal (m) each step, minus 0.01 per step; +10 and the end within
0.5 m of the goal; -10 and the end when the vehicle (a circle of 0.35 m) touches a wall, a rack or a
forklift. An episode is truncated at 600 steps of 50 ms (30 s).

Every random number comes from `self.np_random`, in the same order every step, so the same seed and the
same actions give the same observations bit for bit.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# ---- geometry (m): the area is [0, 20] x [0, 10]; three aisles along x, separated by two rack rows
AREA_W, AREA_H = 20.0, 10.0
# racks as (x_min, y_min, x_max, y_max); the gaps at x 0-3, 8.5-11.5 and 17-20 are the cross aisles
RACKS = np.array(
    [
        [3.0, 2.8, 8.5, 3.6],
        [11.5, 2.8, 17.0, 3.6],
        [3.0, 6.4, 8.5, 7.2],
        [11.5, 6.4, 17.0, 7.2],
    ]
)
# one forklift per aisle, shuttling along x between the rack ends at constant speed:
# (y of the lane, x_from, x_to, speed m/s)
FORKLIFT_LANES = np.array([[1.4, 3.0, 17.0, 0.8], [5.0, 3.0, 17.0, 0.6], [8.6, 3.0, 17.0, 0.7]])
LANE_LENGTHS = FORKLIFT_LANES[:, 2] - FORKLIFT_LANES[:, 1]
FORKLIFT_RADIUS = 0.45
# goal stations at both ends of each aisle, clear of the forklift lanes (those end at x = 17.45 / 2.55)
STATIONS = np.array([[1.2, 1.4], [1.2, 5.0], [1.2, 8.6], [18.8, 1.4], [18.8, 5.0], [18.8, 8.6]])

# ---- vehicle
RADIUS = 0.35
SPEED_RANGE = (-0.5, 1.5)  # m/s, commanded
YAW_RATE_RANGE = (-1.0, 1.0)  # rad/s, commanded
LAG_S = 0.2  # first-order lag of the drive on speed and yaw rate
ACCEL_MAX = 1.0  # m/s2: a loaded AGV must not shed its load
YAW_ACCEL_MAX = 2.0  # rad/s2
DT_S = 0.05  # the control period: rl2edge's 50 ms budget
EPISODE_STEPS = 600  # 30 s

# ---- sensors
N_BEAMS = 24
BEAM_ANGLES = np.arange(N_BEAMS) * (2.0 * np.pi / N_BEAMS)  # vehicle frame, 0 = straight ahead
LIDAR_MAX_M = 8.0
LIDAR_SIGMA_M = 0.02
LIDAR_DROPOUT_P = 0.02
ACCEL_SIGMA = 0.05  # m/s2
YAW_RATE_SIGMA = 0.01  # rad/s
SPEED_SIGMA = 0.01  # m/s
GOAL_DIST_MAX = float(np.hypot(AREA_W, AREA_H))

# ---- reward
GOAL_TOLERANCE_M = 0.5
GOAL_BONUS = 10.0
COLLISION_PENALTY = -10.0
TIME_PENALTY = 0.01

# The observation's keys in their declared order, and the order AgvFlatEnv concatenates them in.
# gymnasium 1.x sorts the keys of a plain dict given to spaces.Dict (goal, imu, lidar, speed, "for legacy
# reasons"); a list of pairs or an OrderedDict keeps the order given, so the spaces are built from pairs.
# gymnasium.wrappers.FlattenObservation follows the Dict's key order.
# (key, low, high) per key; each env builds its own spaces from these (a space carries its own RNG)
OBS_BOUNDS: list[tuple[str, np.ndarray, np.ndarray]] = [
    ("lidar", np.zeros(N_BEAMS, np.float32), np.full(N_BEAMS, LIDAR_MAX_M, np.float32)),
    ("imu", np.array([-2.0, -2.0], np.float32), np.array([2.0, 2.0], np.float32)),  # m/s2, rad/s
    ("goal", np.array([0.0, -1.0, -1.0], np.float32), np.array([GOAL_DIST_MAX, 1.0, 1.0], np.float32)),
    ("speed", np.array([-1.0], np.float32), np.array([2.0], np.float32)),
]
FLAT_KEYS = tuple(key for key, _, _ in OBS_BOUNDS)


def _lidar_ranges(x: float, y: float, heading: float, forklifts: np.ndarray) -> np.ndarray:
    """True ranges (m) of all beams from the vehicle's centre to the nearest wall, rack or forklift."""
    angles = heading + BEAM_ANGLES
    dx, dy = np.cos(angles), np.sin(angles)
    # a zero component would make 0 * inf = nan in the slab test below; a tiny one gives the same answer
    dx = np.where(np.abs(dx) < 1e-12, 1e-12, dx)
    dy = np.where(np.abs(dy) < 1e-12, 1e-12, dy)
    # walls: the vehicle is inside the area, so each beam leaves it through the nearer of two walls
    t_wall = np.minimum(np.where(dx > 0, AREA_W - x, -x) / dx, np.where(dy > 0, AREA_H - y, -y) / dy)
    # racks: the slab test, beams x racks
    tx1, tx2 = (RACKS[:, 0] - x) / dx[:, None], (RACKS[:, 2] - x) / dx[:, None]
    ty1, ty2 = (RACKS[:, 1] - y) / dy[:, None], (RACKS[:, 3] - y) / dy[:, None]
    t_in = np.maximum(np.minimum(tx1, tx2), np.minimum(ty1, ty2))
    t_out = np.minimum(np.maximum(tx1, tx2), np.maximum(ty1, ty2))
    t_rack = np.where((t_out >= np.maximum(t_in, 0.0)), np.maximum(t_in, 0.0), np.inf).min(axis=1)
    # forklifts: ray-circle intersection, beams x forklifts (unit direction, so a = 1)
    ox, oy = x - forklifts[:, 0], y - forklifts[:, 1]
    b = dx[:, None] * ox + dy[:, None] * oy
    c = ox**2 + oy**2 - FORKLIFT_RADIUS**2
    disc = b**2 - c
    t_near = -b - np.sqrt(np.maximum(disc, 0.0))
    t_fork = np.where((disc >= 0.0) & (t_near >= 0.0), t_near, np.inf).min(axis=1)
    return np.minimum(np.minimum(t_wall, t_rack), np.minimum(t_fork, LIDAR_MAX_M))


def _collision(x: float, y: float, forklifts: np.ndarray) -> str | None:
    """What the vehicle's circle touches, if anything: "wall", "rack" or "forklift"."""
    if not (RADIUS <= x <= AREA_W - RADIUS and RADIUS <= y <= AREA_H - RADIUS):
        return "wall"
    nearest_x = np.clip(x, RACKS[:, 0], RACKS[:, 2])  # the closest point of each rack to the centre
    nearest_y = np.clip(y, RACKS[:, 1], RACKS[:, 3])
    if np.any(np.hypot(x - nearest_x, y - nearest_y) <= RADIUS):
        return "rack"
    if np.any(np.hypot(x - forklifts[:, 0], y - forklifts[:, 1]) <= RADIUS + FORKLIFT_RADIUS):
        return "forklift"
    return None


class AgvPlant(gym.Env):
    """The plant core: dynamics, sensors, reward. Subclasses choose the observation's form (`_observe`).

    Test hook: `reset(options={"pose": (x, y, heading), "goal": i})` places the vehicle at a pose (m, m,
    rad) and/or picks goal station `i` of `STATIONS`; the random draws of reset are made all the same,
    so the forklifts start where they would have for that seed.
    """

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self) -> None:
        self.action_space = gym.spaces.Box(
            low=np.array([SPEED_RANGE[0], YAW_RATE_RANGE[0]], np.float32),
            high=np.array([SPEED_RANGE[1], YAW_RATE_RANGE[1]], np.float32),
        )
        self._pose = np.zeros(3)  # x, y, heading
        self._speed = self._yaw_rate = self._accel = 0.0  # the drive's actual state
        self._goal = STATIONS[0].copy()
        self._distance = 0.0  # to the goal, m, as of the last step
        self._fork_phase = np.zeros(len(FORKLIFT_LANES))  # distance travelled along each lane's round trip
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        rng = self.np_random
        start = int(rng.integers(len(STATIONS)))
        goal = int((start + rng.integers(1, len(STATIONS))) % len(STATIONS))  # never the start station
        jitter = rng.uniform(-0.2, 0.2, size=2)
        heading = float(rng.uniform(-np.pi, np.pi))
        self._fork_phase = rng.uniform(0.0, 2.0 * LANE_LENGTHS)
        options = options or {}
        self._goal = STATIONS[int(options.get("goal", goal))].copy()
        if "pose" in options:
            self._pose = np.asarray(options["pose"], np.float64).copy()
        else:
            self._pose = np.array([*(STATIONS[start] + jitter), heading])
        self._speed = self._yaw_rate = self._accel = 0.0
        self._t = 0
        self._distance = self._goal_distance()
        return self._observe(self._measure()), {}

    def step(self, action: Any) -> Any:
        command = np.clip(
            np.asarray(action, np.float64).reshape(-1), self.action_space.low, self.action_space.high
        )
        # the drive: a first-order lag toward the command (exact for a command held over the step),
        # then the acceleration limits (0.05 m/s and 0.1 rad/s a step), which bind on large changes
        follow = 1.0 - np.exp(-DT_S / LAG_S)
        dv = np.clip(follow * (command[0] - self._speed), -ACCEL_MAX * DT_S, ACCEL_MAX * DT_S)
        dw = np.clip(follow * (command[1] - self._yaw_rate), -YAW_ACCEL_MAX * DT_S, YAW_ACCEL_MAX * DT_S)
        self._speed += float(dv)
        self._yaw_rate += float(dw)
        self._accel = float(dv) / DT_S
        # unicycle kinematics, integrated at the mid-step heading
        x, y, heading = self._pose
        mid = heading + 0.5 * self._yaw_rate * DT_S
        x += self._speed * np.cos(mid) * DT_S
        y += self._speed * np.sin(mid) * DT_S
        turned = heading + self._yaw_rate * DT_S
        heading = float(np.arctan2(np.sin(turned), np.cos(turned)))  # kept in (-pi, pi]
        self._pose = np.array([x, y, heading])
        self._fork_phase = (self._fork_phase + FORKLIFT_LANES[:, 3] * DT_S) % (2.0 * LANE_LENGTHS)
        self._t += 1

        distance = self._goal_distance()
        reward = (self._distance - distance) - TIME_PENALTY  # progress toward the goal, in metres
        self._distance = distance
        info: dict[str, Any] = {}
        hit = _collision(x, y, self._forklifts())
        if hit is not None:
            reward += COLLISION_PENALTY
            info.update(event="collision", hit=hit)
        elif distance <= GOAL_TOLERANCE_M:
            reward += GOAL_BONUS
            info.update(event="goal")
        terminated = "event" in info
        truncated = self._t >= EPISODE_STEPS and not terminated  # the time limit lives in the env
        return self._observe(self._measure()), float(reward), terminated, truncated, info

    def _forklifts(self) -> np.ndarray:
        """The forklifts' centres (3 x 2, m): each lane's round trip folded back onto the lane."""
        along = np.where(
            self._fork_phase < LANE_LENGTHS, self._fork_phase, 2.0 * LANE_LENGTHS - self._fork_phase
        )
        return np.stack([FORKLIFT_LANES[:, 1] + along, FORKLIFT_LANES[:, 0]], axis=1)

    def _goal_distance(self) -> float:
        return float(np.hypot(*(self._goal - self._pose[:2])))

    def _measure(self) -> dict[str, np.ndarray]:
        """All sensors, with their noise. The draws are the same in number and order every call (lidar
        noise, dropouts, IMU, speed), whatever the state, which is what keeps a seed's episode exact."""
        rng = self.np_random
        x, y, heading = self._pose
        ranges = _lidar_ranges(x, y, heading, self._forklifts()) + rng.normal(0.0, LIDAR_SIGMA_M, N_BEAMS)
        ranges = np.where(rng.random(N_BEAMS) < LIDAR_DROPOUT_P, LIDAR_MAX_M, ranges)  # no echo: max range
        imu = np.array([self._accel, self._yaw_rate]) + rng.normal(0.0, [ACCEL_SIGMA, YAW_RATE_SIGMA])
        speed = self._speed + rng.normal(0.0, SPEED_SIGMA)
        # the goal comes from the fleet manager and the vehicle's localization: exact here
        bearing = float(np.arctan2(self._goal[1] - y, self._goal[0] - x)) - heading
        goal = np.array([self._distance, np.cos(bearing), np.sin(bearing)])
        values = {"lidar": ranges, "imu": imu, "goal": goal, "speed": np.array([speed])}
        # clip into the declared bounds: noise must not take an observation out of its space
        return {key: np.clip(values[key], low, high).astype(np.float32) for key, low, high in OBS_BOUNDS}

    def _observe(self, measured: dict[str, np.ndarray]) -> Any:
        raise NotImplementedError


class AgvDictEnv(AgvPlant):
    """The AGV with a Dict observation: lidar (24), imu (2), goal (3), speed (1), all float32. Its
    metadata's `observation_units` go into the artifact's manifest, one unit per key."""

    metadata = {  # noqa: RUF012 (gymnasium's convention)
        **AgvPlant.metadata,
        "observation_units": {"lidar": "m", "imu": "m/s2, rad/s", "goal": "m, -, -", "speed": "m/s"},
    }

    def __init__(self) -> None:
        super().__init__()
        # built from a list of pairs: the declared order is kept (a plain dict would be sorted)
        self.observation_space = gym.spaces.Dict(
            [(key, gym.spaces.Box(lo, hi)) for key, lo, hi in OBS_BOUNDS]
        )

    def _observe(self, measured: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return measured


class AgvFlatEnv(AgvPlant):
    """The AGV with one Box observation: the Dict's keys concatenated in `FLAT_KEYS` order (30 values)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(
            low=np.concatenate([low for _, low, _ in OBS_BOUNDS]),
            high=np.concatenate([high for _, _, high in OBS_BOUNDS]),
        )

    def _observe(self, measured: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([measured[key] for key in FLAT_KEYS])
