"""A warehouse AGV with lidar, IMU, goal and speed sensors: examples/agv/README.md."""

from examples.agv.env import FLAT_KEYS, AgvDictEnv, AgvFlatEnv, AgvPlant

__all__ = ["FLAT_KEYS", "AgvDictEnv", "AgvFlatEnv", "AgvPlant"]
