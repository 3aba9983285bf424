"""One error tree for the whole project.

The CLI turns any `Rl2EdgeError` into a one-line message and a non-zero exit; anything else is a bug
and keeps its traceback.
"""


class Rl2EdgeError(Exception):
    """Root of every error the project raises on purpose."""


class ConfigError(Rl2EdgeError):
    """A command-line option, preset or config file is wrong (unknown env id, bad value...)."""


class CheckpointError(Rl2EdgeError):
    """A checkpoint directory is missing, incomplete, corrupted or of an unknown format."""


class ExportError(Rl2EdgeError):
    """Exporting a checkpoint to an artifact failed."""


class ShapeError(ExportError):
    """An exported model's inputs or outputs do not have the shapes the source has."""


class ToleranceError(ExportError):
    """An exported model's outputs differ from its source's by more than the stated tolerance."""


class ManifestError(Rl2EdgeError):
    """An artifact's manifest or files do not check out (schema, hashes, missing files)."""


class ObservationError(Rl2EdgeError):
    """An observation given to a policy is not what the manifest declares (shape, dtype, NaN/Inf)."""


class BackendError(Rl2EdgeError):
    """No interpreter is available, or the interpreter failed to load or run the model."""


class BridgeError(Rl2EdgeError):
    """The OPC UA bridge cannot reach, authenticate with, or map the PLC."""
