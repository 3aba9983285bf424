"""What the deployable graph is, without any framework: its tensor names, the heads and their formulas,
what the manifest says is folded inside, and the inputs and outputs that folded noise adds.

Both export routes (torch -> ONNX -> onnx2tf, and TF SavedModel) build the graph these names and formulas
describe; reading them imports neither torch nor TensorFlow, so the TF route never loads torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.errors import ExportError
from rl2edge.specs import ActionSpec, ActionTransform, NoiseSpec, StateTensor
from rl2edge.train import algos
from rl2edge.train.core.normalization import RunningNormalizer

OPSET = 17
INPUT_NAME, OUTPUT_NAME = "obs", "action"
NOISE_INPUT, STATE_INPUT, STATE_OUTPUT = "noise", "ou_state", "ou_state_out"

HEADS = ("argmax", "clip_unscale", "clip", "tanh_unscale", "unscale")
FORMULAS = {
    "argmax": "argmax(out) + start",
    "clip_unscale": "center + clip(out, -1, 1) * half_range",
    "clip": "clip(out, low, high)",
    "tanh_unscale": "center + tanh(out) * half_range",
    "unscale": "center + out * half_range",
}


EPISODE_START = "episode_start"


def state_io_names(states: list[StateTensor]) -> tuple[list[str], list[str]]:
    """A stateful graph's inputs after the observation, and its outputs after the action, in order."""
    return [EPISODE_START, *(t.name for t in states)], [t.output for t in states]


def state_section(states: list[StateTensor], cell: str) -> dict[str, Any]:
    """The manifest's `state` section (runtime.state reads it; runtime.manifest_schema checks it)."""
    return {
        "episode_start": {
            "input": EPISODE_START,
            "shape": [1, 1],
            "dtype": "float32",
            "formula": "every state input is multiplied by (1 - episode_start) before it is used",
        },
        "tensors": [t.to_json() for t in states],
        "cell": cell,
        "resets": {
            "episode_start": "the graph zeroes the state when the episode_start input is 1",
            "Policy.reset()": "the runtime's state back to its initial value; the next call feeds episode_start = 1",
            "load": "a freshly loaded policy starts as after reset()",
        },
    }


def folded_description(norm: RunningNormalizer, action: ActionSpec, head: str) -> dict[str, Any]:
    """What the manifest says is inside the graph."""
    mean, inv_std = norm.constants()
    transform: dict[str, Any] = {"kind": head, "formula": FORMULAS[head]}
    if action.discrete:
        transform["start"] = action.start
    elif action.multi_discrete:  # one argmax per component over its slice of the logits
        transform.update(
            formula="argmax(out[slice_i]) + start[i] per component",
            nvec=list(action.nvec),
            start=list(action.starts),
        )
    else:
        t = ActionTransform(action)
        transform.update(
            center=t.center.tolist(),
            half_range=t.half_range.tolist(),
            low=list(action.low),
            high=list(action.high),
        )
    normalization: dict[str, Any] = {
        "enabled": norm.enabled,
        "formula": "clip((obs - mean) * inv_std, -clip, clip)",
        "mean": mean.reshape(-1).tolist(),
        "inv_std": inv_std.reshape(-1).tolist(),
        "clip": norm.clip if norm.enabled else None,
        "eps": norm.eps,
        "count": norm.count,
    }
    if norm.enabled and norm.raw is not None:
        normalization["raw"] = {
            "indices": np.flatnonzero(norm.raw.reshape(-1)).tolist(),
            "why": (
                "left as they are (mean 0, inv_std 1, no clip): image keys, which the network scales, and "
                "keys outside VecNormalize's norm_obs_keys"
            ),
        }
    return {
        "normalization": normalization,
        "action_transform": transform,
        "noise": None,
    }


def head_for(algo: str, discrete: bool) -> str:
    """The head of the algorithm's deterministic policy (train.algos); categorical (Discrete,
    MultiDiscrete) actions: argmax (per component)."""
    return "argmax" if discrete else algos.get(algo, in_checkpoint=True).head


def check_noise_fits(
    spec: NoiseSpec, head: str, discrete: bool, policy_distribution: bool, algo: str
) -> None:
    """Refuse, with the reason, noise that this source's head cannot carry; `policy` noise needs a policy
    with a distribution (its agent class's `policy_distribution`). `algo` names the source in the message."""
    if discrete:
        raise ExportError(
            "--noise applies to continuous (Box) actions; a discrete policy's exploration (epsilon-greedy, "
            "sampling) is not folded"
        )
    if head not in ("clip_unscale", "tanh_unscale", "unscale"):
        raise ExportError(f"--noise needs a head with a [-1, 1]-scaled action; this source's head is {head}")
    if spec.kind == "policy" and not policy_distribution:
        raise ExportError(
            f"--noise policy samples the policy's own distribution, which this source ({algo}) does not "
            f"have or export does not fold. Use gaussian:sigma=... or ou:theta=...,sigma=..."
        )


def io_names(spec: NoiseSpec | None) -> tuple[list[str], list[str]]:
    """The graph's input and output names. OU's state follows the state contract (`noise_states`): the
    episode-start flag and `ou_state` in, `ou_state_out` out."""
    if spec is None:
        return ["obs"], ["action"]
    if spec.kind == "ou":
        return ["obs", NOISE_INPUT, EPISODE_START, STATE_INPUT], ["action", STATE_OUTPUT]
    return ["obs", NOISE_INPUT], ["action"]


OU_CELL = (
    "OU noise: x = ou_state * (1 - episode_start); x' = x - (theta*dt) * x + (sigma*sqrt(dt)) * noise; "
    "ou_state_out = x' (in [-1, 1]-scaled action units)"
)


def noise_states(spec: NoiseSpec | None, act_dim: int) -> list[StateTensor]:
    """The state tensors folded noise adds: OU's process state; none for the others."""
    if spec is None or spec.kind != "ou":
        return []
    return [StateTensor.row(STATE_INPUT, act_dim, "the OU noise process, in [-1, 1]-scaled action units")]


def manifest_section(spec: NoiseSpec, seed: int, act_dim: int) -> dict[str, Any]:
    graph: dict[str, Any] = {"inputs": [NOISE_INPUT], "outputs": [], "noise_input": NOISE_INPUT}
    if spec.kind == "ou":  # the runtime feeds it as every state (the manifest's `state` section lists it)
        graph["state"] = STATE_INPUT
    formula = {
        "gaussian": "action = center + clip(s + sigma * noise, -1, 1) * half_range",
        "ou": "x = ou_state * (1 - episode_start); x' = x - (theta*dt) * x + (sigma*sqrt(dt)) * noise; "
        "action = center + clip(s + x', -1, 1) * half_range; ou_state_out = x'",
        "policy": "SAC: center + tanh(mean + exp(log_std) * noise) * half_range; "
        "PPO: center + clip(mean + exp(log_std) * noise, -1, 1) * half_range",
    }[spec.kind]
    return {
        **spec.to_json(),
        "spec": str(spec),
        "formula": formula + " (s: the deterministic head's action in [-1, 1])",
        "seed": seed,
        "dim": act_dim,
        "graph": graph,
        "entropy": "the runtime feeds `noise` with standard-normal float32 draws from numpy.random.default_rng(seed), "
        "one per action dimension and control cycle, and zeros when exploration is off",
    }
