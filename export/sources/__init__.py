"""The export sources, and the one place a path's source is chosen.

Each source is a module here with `from_path(path, options) -> ExportSource` (export.source's contract). To add
one, write its module and add its row to `SOURCES`: a test that the path is of its kind, and the options it
takes. The first row whose `matches` holds takes the path; the rl2edge run directory comes last and takes
the rest (its loader says what is wrong with a path that is no checkpoint).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rl2edge.errors import ConfigError
from rl2edge.export.source import ExportSource


@dataclass(frozen=True)
class SourceOptions:
    """What the command line may say about a source that its file does not."""

    env: str | None = None
    """--env: the Gymnasium env id the policy acts in (for the closed-loop checks)."""
    vecnormalize: Path | None = None
    """--vecnormalize: SB3's VecNormalize statistics (.pkl)."""
    spec: Path | None = None
    """--spec: a policy spec (export.policy_spec), what a file trained elsewhere cannot say of itself."""


@dataclass(frozen=True)
class SourceKind:
    name: str
    """As the manifest's `source.kind` says it."""
    what: str
    """What such a path is, as messages say it."""
    matches: Callable[[Path], bool]
    module: str
    """The module with `from_path(path, options)`: imported only for its own paths."""
    options: tuple[str, ...] = ()
    """The SourceOptions fields it takes; giving it another is an error."""


SOURCES: tuple[SourceKind, ...] = (
    SourceKind(
        "onnx",
        "an ONNX file (.onnx)",
        lambda p: p.suffix == ".onnx",
        "rl2edge.export.sources.onnx_file",
        ("spec", "env"),
    ),
    SourceKind(
        "stable-baselines3",
        "a Stable-Baselines3 model (.zip)",
        lambda p: p.suffix == ".zip",
        "rl2edge.export.sources.sb3",
        ("env", "vecnormalize"),
    ),
    SourceKind(
        "torchscript",
        "a TorchScript file (.pt)",
        lambda p: _torch_archive(p) == "script",
        "rl2edge.export.sources.torch_module",
        ("spec", "env"),
    ),
    SourceKind(
        "rsl-rl-checkpoint",
        "an rsl-rl checkpoint (.pt)",
        lambda p: _torch_archive(p) == "data",
        "rl2edge.export.sources.rsl_rl",
        ("spec", "env"),
    ),
    SourceKind(
        "saved-model",
        "a TensorFlow SavedModel (a folder with saved_model.pb)",
        lambda p: p.is_dir() and (p / "saved_model.pb").is_file(),
        "rl2edge.export.sources.saved_model",
        ("spec", "env"),
    ),
    SourceKind(
        "rl2edge-checkpoint",
        "a run directory written by `rl2edge train`",
        lambda p: True,
        "rl2edge.export.sources.checkpoint",
    ),
)


def _torch_archive(path: Path) -> str | None:
    """A .pt/.pth file's kind: "script" (TorchScript: the module's code inside), "data" (torch.save's
    tensors), or None (not a torch zip)."""
    import zipfile

    if path.suffix not in (".pt", ".pth") or not path.is_file() or not zipfile.is_zipfile(path):
        return None
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    if any("/code/" in n for n in names):
        return "script"
    return "data" if any(n.endswith("/data.pkl") for n in names) else None


def kind_of(path: Path) -> SourceKind:
    return next(k for k in SOURCES if k.matches(path))


def open_source(path: Path, options: SourceOptions | None = None) -> ExportSource:
    """The export source of `path`, by its kind; an option its kind does not take is a ConfigError."""
    options = options or SourceOptions()
    kind = kind_of(Path(path))
    given = [f.name for f in dataclasses.fields(options) if getattr(options, f.name) is not None]
    extra = [name for name in given if name not in kind.options]
    if extra:
        flags = " and ".join(f"--{name}" for name in extra)
        takers = [k.what for k in SOURCES if set(extra) <= set(k.options)]
        listed = ", ".join(takers[:-1]) + (" or " if len(takers) > 1 else "") + takers[-1] if takers else ""
        raise ConfigError(
            f"{flags}: {path} is {kind.what}, which does not take {'it' if len(extra) == 1 else 'them'}"
            + (f"; {flags} {'is' if len(extra) == 1 else 'are'} for {listed}" if takers else "")
        )
    source: ExportSource = importlib.import_module(kind.module).from_path(Path(path), options)
    return source
