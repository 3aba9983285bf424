"""A kind of export source written by the recipe of docs/architecture.md ("Adding an export source"), for
the test that holds the recipe to its word: a linear policy saved as an .npz (`weight` [act, obs], `bias`
[act]) for a Box env, on the torch route. One module and one row in export.sources.SOURCES; the pipeline
is not touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rl2edge.errors import ConfigError
from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.sources import SourceKind, SourceOptions
from rl2edge.export.torch_graph import TorchSource
from rl2edge.fileio import sha256_file
from rl2edge.train.core.envs import make_env
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.spaces import action_spec, observation_spec

KIND = SourceKind(
    "toy-linear", "a linear policy (.npz)", lambda p: p.suffix == ".npz", "testkit.toy_source", ("env",)
)


def from_path(path: Path, options: SourceOptions) -> Any:
    if options.env is None:
        raise ConfigError(f"{path}: a linear policy needs --env ENV_ID")
    env = make_env(options.env)
    observation, action = observation_spec(env.observation_space), action_spec(env.action_space)
    env.close()
    data = np.load(path)
    actor = nn.Linear(observation.size, action.size)
    with torch.no_grad():
        actor.weight.copy_(torch.from_numpy(data["weight"].astype(np.float32)))
        actor.bias.copy_(torch.from_numpy(data["bias"].astype(np.float32)))
    norm = RunningNormalizer(observation.shape, enabled=False)
    policy = DeployablePolicy(actor, norm, action, "clip_unscale").eval()
    description = {"kind": KIND.name, "file": str(path), "sha256": sha256_file(path), "env_id": options.env}
    return TorchSource(
        options.env, observation, action, norm, "clip_unscale", description, "linear (torch)", algo="linear",
        policy=policy,
    )  # fmt: skip
