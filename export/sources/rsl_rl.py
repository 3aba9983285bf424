"""An rsl-rl checkpoint (`model_<iteration>.pt`, what `OnPolicyRunner.save` writes, Isaac Lab's training
runs included) with its policy spec, on the torch route: the actor rebuilt from its state_dict (the MLP,
an LSTM's or GRU's layers in front of it as one step of gates with their state on the artifact's
contract), its EmpiricalNormalization's statistics folded as rsl-rl applies them,
(x - mean) / (std + 0.01). The weights say the layers' sizes; the spec says the observation, the action,
and the hidden layers' activation (rsl-rl's default, elu, unless it says otherwise).

Two layouts are read: rsl-rl 3 and later (`actor_state_dict`: `obs_normalizer._mean`, `mlp.<i>`,
`rnn.rnn.*`, `distribution.std_param`) and rsl-rl 2 (`model_state_dict`: `actor.<i>`, `memory_a.rnn.*`,
`std`, with `obs_norm_state_dict`). The file is read with torch.load(weights_only=True): tensors and plain
values only, no pickled code.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rl2edge.errors import ConfigError
from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.policy_spec import NO_CLIP, PolicySpec, load_policy_spec
from rl2edge.export.torch_graph import TorchSource
from rl2edge.fileio import sha256_file
from rl2edge.train.core.normalization import RunningNormalizer

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions

EMPIRICAL_EPS = 1e-2
"""rsl-rl's EmpiricalNormalization default epsilon, which its checkpoint does not store."""
ACTIVATIONS = {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "selu": nn.SELU, "leaky_relu": nn.LeakyReLU}


def _actor_parts(path: Path, data: Any) -> tuple[dict[str, torch.Tensor], str, str, dict[str, torch.Tensor]]:
    """(the actor's tensors, the MLP's prefix, the RNN's prefix, the normalizer's tensors) of either layout."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not an rsl-rl checkpoint's mapping")
    if "actor_state_dict" in data:
        sd = data["actor_state_dict"]
        norm = {
            k.removeprefix("obs_normalizer."): v for k, v in sd.items() if k.startswith("obs_normalizer.")
        }
        return sd, "mlp.", "rnn.rnn.", norm
    if "model_state_dict" in data:
        return (
            data["model_state_dict"],
            "actor.",
            "memory_a.rnn.",
            dict(data.get("obs_norm_state_dict") or {}),
        )
    raise ConfigError(
        f"{path} has no actor_state_dict (rsl-rl 3 and later) or model_state_dict (rsl-rl 2): is it an rsl-rl "
        f"checkpoint? It holds {sorted(map(str, data))[:6]}"
    )


def _mlp(path: Path, sd: dict[str, torch.Tensor], prefix: str, activation: str) -> nn.Sequential:
    indices = sorted(
        {int(m.group(1)) for k in sd if (m := re.match(rf"{re.escape(prefix)}(\d+)\.weight$", k))}
    )
    if not indices:
        raise ConfigError(f"{path}: the actor has no layers {prefix}<i>.weight")
    layers: list[nn.Module] = []
    for n, i in enumerate(indices):
        weight, bias = sd[f"{prefix}{i}.weight"], sd[f"{prefix}{i}.bias"]
        linear = nn.Linear(weight.shape[1], weight.shape[0])
        linear.load_state_dict({"weight": weight, "bias": bias})
        layers.append(linear)
        if n < len(indices) - 1:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def _rnn(path: Path, sd: dict[str, torch.Tensor], prefix: str, in_dim: int) -> nn.Module | None:
    keys = {k.removeprefix(prefix): v for k, v in sd.items() if k.startswith(prefix)}
    if not keys:
        return None
    layers = 1 + max(int(k.rsplit("_l", 1)[1]) for k in keys)
    hidden = keys["weight_hh_l0"].shape[1]
    gates = keys["weight_hh_l0"].shape[0] // hidden
    cls = {4: nn.LSTM, 3: nn.GRU}.get(gates)
    if cls is None:
        raise ConfigError(f"{path}: the actor's recurrent layer has {gates} gates; an LSTM has 4 and a GRU 3")
    rnn = cls(in_dim, hidden, num_layers=layers)
    rnn.load_state_dict(keys)
    return rnn


def _normalizer(path: Path, spec: PolicySpec, stats: dict[str, torch.Tensor]) -> RunningNormalizer:
    """The checkpoint's EmpiricalNormalization as the graph folds it: (x - mean) * 1 / (std + eps)."""
    shape = spec.observation.shape
    if spec.normalization_kind == "none" or not stats:
        if spec.normalization_kind == "in-graph" and not stats:
            raise ConfigError(
                f"{path}: the spec says normalization in-graph, and the actor has no obs_normalizer"
            )
        return RunningNormalizer(shape, enabled=False)
    if spec.normalization_kind != "in-graph":
        raise ConfigError(
            f"{spec.path}: an rsl-rl checkpoint carries its own normalizer: say `normalization: in-graph` (or none)"
        )
    mean = stats["_mean"].detach().double().numpy().reshape(-1)
    std = (stats["_std"] if "_std" in stats else stats["_var"].sqrt()).detach().double().numpy().reshape(-1)
    if mean.size != spec.observation.size:
        raise ConfigError(
            f"{path}: the normalizer holds {mean.size} values; the spec's observation has {spec.observation.size}"
        )
    norm = RunningNormalizer(shape, clip=NO_CLIP, eps=0.0)
    norm.mean = mean.reshape(shape)
    norm.var = ((std + EMPIRICAL_EPS) ** 2).reshape(shape)
    return norm


def from_path(path: Path, options: SourceOptions) -> TorchSource:
    """export.sources' entry point."""
    if options.spec is None:
        raise ConfigError(
            f"{path}: an rsl-rl checkpoint needs --spec SPEC.yaml, for the observation's bounds, the action and "
            "the activation (docs/export.md, 'Policies trained elsewhere')"
        )
    spec = load_policy_spec(options.spec)
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types; weights_only refuses pickled code
        raise ConfigError(
            f"{path} cannot be read as a checkpoint of tensors (torch.load weights_only): {exc}"
        ) from None
    sd, mlp_prefix, rnn_prefix, stats = _actor_parts(path, data)
    norm = _normalizer(path, spec, stats)
    mlp = _mlp(path, sd, mlp_prefix, spec.activation)
    rnn = _rnn(path, sd, rnn_prefix, spec.observation.size)
    action = spec.action.action
    if mlp[-1].out_features != action.output_width:
        raise ConfigError(
            f"{path}: the actor outputs {mlp[-1].out_features} values; the spec's action needs {action.output_width}"
        )
    actor: nn.Module = mlp
    if rnn is not None:  # one step of its gates per call, the state on the artifact's contract
        from rl2edge.train.torch_backend.recurrent_nets import GRUCellActor, LSTMCellActor

        std = sd.get("distribution.std_param", sd.get("std"))
        log_std = torch.log(std) if std is not None else torch.zeros(action.output_width)
        view = SimpleNamespace(
            lstm_actor=rnn, layers=rnn.num_layers, hidden=rnn.hidden_size, discrete=action.discrete,
            heads=SimpleNamespace(actor=mlp, log_std=log_std),
        )  # fmt: skip
        actor = (LSTMCellActor if isinstance(rnn, nn.LSTM) else GRUCellActor)(view)  # type: ignore[arg-type]
    policy = DeployablePolicy(actor, norm, action, spec.action.head).eval()
    env_id = options.env or spec.env_id
    description = spec.describe(
        "rsl-rl-checkpoint", path, sha256_file(path), env_id,
        iteration=data.get("iter"), recurrent=None if rnn is None else type(rnn).__name__,
    )  # fmt: skip
    fields = spec.source_fields(env_id, description, f"{path.name} (torch)")
    return TorchSource(**{**fields, "norm": norm, "normalized_inside": False}, policy=policy)
