"""Does the policy fit the env it is exported and evaluated in? Known as soon as both are: a spec that
declares a Box action for CartPole (Discrete(2)) had gone on to a 37-line gymnasium traceback at the first
env.step of calibration, and again at evaluate. Export and evaluate both ask."""

from __future__ import annotations

from rl2edge.errors import ConfigError
from rl2edge.specs import ActionSpec, ObservationSpec


def _action_shape(a: ActionSpec) -> str:
    if a.kind == "discrete":
        return f"Discrete({a.n})"
    if a.kind == "multi_discrete":
        return f"MultiDiscrete({list(a.nvec)})"
    return f"Box of shape {list(a.shape)}"


SPEC_FIX = "correct the policy spec, or give the env the policy was trained in (--env)"
ARTIFACT_FIX = "give the env the artifact was exported for (--env; its manifest's source.env_id)"


def check_fits_env(
    observation: ObservationSpec, action: ActionSpec, env_id: str, fix: str = SPEC_FIX
) -> None:
    """The action's kind and size, and the observation's number of values, against the env's spaces; `fix`
    ends the message (what the user corrects)."""
    from rl2edge.train.core.envs import make_env
    from rl2edge.train.core.spaces import action_spec, observation_spec

    env = make_env(env_id)
    try:
        env_action = action_spec(env.action_space)
        env_observation = observation_spec(env.observation_space)
    finally:
        env.close()
    if _action_shape(env_action) != _action_shape(action):
        raise ConfigError(
            f"the policy's action is a {_action_shape(action)}, and {env_id} takes a {_action_shape(env_action)}: "
            f"{fix}"
        )
    if env_observation.size != observation.size:
        raise ConfigError(
            f"the policy observes {observation.size} values, and {env_id} gives {env_observation.size} "
            f"(shape {list(env_observation.shape)}): {fix}"
        )
