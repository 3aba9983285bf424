"""Deployable torch graph -> ONNX (opset 17), batch fixed at 1: one observation per control cycle."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from rl2edge.errors import ExportError
from rl2edge.export.graph_spec import INPUT_NAME, OPSET, OUTPUT_NAME


def export_onnx(
    policy: torch.nn.Module,
    obs_shape: tuple[int, ...],
    path: Path,
    examples: tuple[torch.Tensor, ...] | None = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
) -> None:
    """`examples` and the names: graphs with more than the observation in (folded noise, OU state)."""
    examples = examples or (torch.zeros((1, *obs_shape), dtype=torch.float32),)
    try:
        with warnings.catch_warnings():
            # The TorchScript exporter is deprecated in favour of torch.export, which needs onnxscript; for
            # these small static graphs it is the lighter, proven path.
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.onnx.export(
                policy,
                examples,
                str(path),
                opset_version=OPSET,
                input_names=input_names or [INPUT_NAME],
                output_names=output_names or [OUTPUT_NAME],
                dynamo=False,
            )
    except Exception as exc:  # the exporter raises many types
        raise ExportError(f"ONNX export failed: {exc}") from exc
    import onnx

    onnx.checker.check_model(onnx.load(str(path)))
