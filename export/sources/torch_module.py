"""A torch policy trained elsewhere: a module given from Python (`rl2edge.export.api`, CleanRL-style code)
on the torch route (export.torch_graph), or a TorchScript file (`torch.jit.save`, as Isaac Lab's
`export_policy_as_jit` writes `policy.pt`), which torch's own exporter writes to ONNX for the ONNX route.
The module takes the observation as the spec says (normalized by the spec's statistics, or raw where it
normalizes itself) and returns what the spec's action says; the deployable graph is it between the spec's
normalization and head."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rl2edge.errors import ConfigError, ExportError
from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.policy_spec import PolicySpec, load_policy_spec
from rl2edge.export.source import ExportSource
from rl2edge.export.torch_graph import TorchSource
from rl2edge.fileio import sha256_file

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions


class FlatActor(nn.Module):
    """The module's output as [batch, width] (a module may return [batch, 1, width] or a tuple of which the
    first is the action)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.module(x)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out.reshape(x.shape[0], -1)


def module_source(
    module: nn.Module, spec: PolicySpec, description: dict[str, Any], reference_name: str, env_id: str | None
) -> TorchSource:
    """The export source of a stateless torch `module` described by `spec`."""
    if spec.state:
        raise ExportError(
            "a torch module with state is exported from the file that keeps its state explicit: export the "
            "policy to ONNX with its state inputs and outputs (Isaac Lab's policy.onnx: h_in, c_in) and pass that"
        )
    if spec.per_key_inputs:
        raise ConfigError(
            "a torch module takes one observation input: give observation.input once, not per key"
        )
    module.eval()
    policy = DeployablePolicy(
        FlatActor(module), spec.normalization, spec.action.action, spec.action.head
    ).eval()
    with torch.no_grad():  # the module runs on the spec's observation, and gives the spec's action width
        try:
            out = policy.pre_head(torch.zeros((1, spec.observation.size)))
        except Exception as exc:  # a module raises whatever its own code raises
            raise ConfigError(
                f"{reference_name}: the module does not run on a [1, {spec.observation.size}] observation: {exc}"
            ) from None
    if out.shape[-1] != spec.action.action.output_width:
        raise ConfigError(
            f"{reference_name}: the module returns {out.shape[-1]} values; the spec's action needs "
            f"{spec.action.action.output_width}"
        )
    return TorchSource(**spec.source_fields(env_id, description, reference_name), policy=policy)


def from_path(path: Path, options: SourceOptions) -> ExportSource:
    """export.sources' entry point for a TorchScript file: written to ONNX by torch's own exporter (which
    takes a scripted module as it is), held to the module within float32 rounding, then on the ONNX route."""
    import tempfile

    import numpy as np

    from rl2edge.export.onnx_graph import OnnxFileSource

    if options.spec is None:
        raise ConfigError(
            f"{path}: a TorchScript file needs --spec SPEC.yaml (docs/export.md, 'Policies trained elsewhere')"
        )
    spec = load_policy_spec(options.spec)
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as exc:  # torch raises several types for a file that is no TorchScript archive
        raise ConfigError(f"{path} is not a TorchScript file: {exc}") from None
    if any(name in ("hidden_state", "cell_state") for name, _ in module.named_buffers()):
        raise ConfigError(
            f"{path} keeps a recurrent state inside the module (Isaac Lab's JIT export does): export the ONNX file, "
            "whose state is explicit (h_in, c_in), instead"
        )
    if spec.state or spec.per_key_inputs:
        raise ConfigError(f"{path}: a TorchScript file takes one observation input and no state here")
    work = tempfile.TemporaryDirectory(prefix="rl2edge-torchscript-")
    onnx_path = Path(work.name) / f"{path.stem}.onnx"
    output = spec.action.output or "actions"
    example = torch.zeros((1, spec.observation.size))
    try:
        torch.onnx.export(
            module,
            (example,),
            str(onnx_path),
            input_names=[spec.inputs[0]],
            output_names=[output],
            dynamo=False,
        )
    except Exception as exc:  # the exporter raises many types
        raise ExportError(f"{path}: torch's ONNX exporter could not write the module: {exc}") from None
    spec = dataclasses.replace(spec, action=dataclasses.replace(spec.action, output=output))
    env_id = options.env or spec.env_id
    description = spec.describe("torchscript", path, sha256_file(path), env_id)
    source = OnnxFileSource(
        **spec.source_fields(env_id, description, f"{path.name} (torch, as ONNX)"),
        model_path=onnx_path,
        spec=spec,
    )
    source._workdir = work  # kept with the source: the ONNX file lives as long as the export
    probe = np.random.default_rng(0).normal(size=(16, spec.observation.size)).astype(np.float32)
    with torch.no_grad():
        direct = np.concatenate(
            [
                module(torch.from_numpy(spec.normalization.normalize(p[None]))).numpy().reshape(1, -1)
                for p in probe
            ]
        )
    worst = float(np.abs(source.pre_head(probe) - direct).max())
    if not worst <= 1e-5 * max(1.0, float(np.abs(direct).max())):
        raise ExportError(f"{path}: torch's ONNX file differs from the module by {worst:.3g}; not exported")
    return source
