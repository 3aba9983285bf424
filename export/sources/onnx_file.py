"""An ONNX file trained elsewhere (Isaac Lab's `export_policy_as_onnx`, rsl-rl's runner, any framework's
exporter) with its policy spec (export.policy_spec), on the ONNX route (export.onnx_graph)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING

from rl2edge.errors import ConfigError, short_repr
from rl2edge.export.onnx_graph import OnnxFileSource
from rl2edge.export.policy_spec import load_policy_spec
from rl2edge.export.source import ExportSource
from rl2edge.fileio import sha256_file

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions


def from_path(path: Path, options: SourceOptions) -> ExportSource:
    if not path.is_file():
        raise ConfigError(f"ONNX file {path} does not exist")
    if options.spec is None:
        raise ConfigError(
            f"{path}: an ONNX file needs --spec SPEC.yaml, what the file cannot say (the observation's bounds, "
            "the normalization, what its output means): docs/export.md, 'Policies trained elsewhere'"
        )
    spec = load_policy_spec(options.spec)
    env_id = options.env or spec.env_id
    if env_id is not None:
        from rl2edge.train.core.envs import check_env_id

        check_env_id(env_id)
    description = spec.describe("onnx", path, sha256_file(path), env_id, external_data=_external_data(path))
    return OnnxFileSource(
        **spec.source_fields(env_id, description, f"{path.name} (onnxruntime)"), model_path=path, spec=spec
    )


def _external_data(path: Path) -> dict[str, str]:
    """The files the model keeps its weights in beside the .onnx (torch's exporter writes `<name>.data` for
    large or dynamo-exported models), by name with their sha256: the artifact's record covers them too.
    Each is checked before it is read or hashed (external_data_file)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names = {
        entry.value
        for init in model.graph.initializer
        if init.data_location == onnx.TensorProto.EXTERNAL
        for entry in init.external_data
        if entry.key == "location"
    }
    return {name: sha256_file(external_data_file(path, name)) for name in sorted(names)}


def external_data_file(model: Path, location: str) -> Path:
    """A model folder from outside is a closed box: external data is read only from a regular file inside the
    model's folder. A symlink (`x.data -> /etc/passwd` would be copied byte for byte into the artifact that
    goes to every device), a device or a FIFO (reading /dev/zero never ends), a folder, a missing file, a
    NUL, an absolute or `..` location is one line naming the location."""
    where = f"{model.name}: its external data location {short_repr(location)}"
    if "\0" in location or Path(location).is_absolute() or ".." in Path(location).parts:
        raise ConfigError(f"{where} must name a file inside the model's folder {model.parent}")
    folder = model.parent.resolve()
    target = folder / location
    try:
        info = target.lstat()
    except FileNotFoundError:
        raise ConfigError(
            f"{where} does not exist beside the model: copy it from where the model was exported "
            f"(torch.onnx.export writes it next to the .onnx)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(
            f"{where} is a symbolic link: only regular files inside the model's folder are read"
        )
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device or a FIFO)"
        raise ConfigError(f"{where} is {kind}: only regular files inside the model's folder are read")
    if not target.resolve().is_relative_to(folder):
        raise ConfigError(f"{where} leads outside the model's folder {folder} (through a linked folder)")
    return target
