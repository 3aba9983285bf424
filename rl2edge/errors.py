"""One error tree for the whole project.

The CLI turns any `Rl2EdgeError` into a one-line message and a non-zero exit; anything else is a bug
and keeps its traceback. What a message shows of a value from a file or a server goes through
`short_repr` (bounded length and effort) or `printable` (no terminal control characters).
"""

import re
import reprlib


class Rl2EdgeError(Exception):
    """Root of every error the project raises on purpose."""


class ConfigError(Rl2EdgeError):
    """A command-line option, preset or config file is wrong (unknown env id, bad value...)."""


class CheckpointError(Rl2EdgeError):
    """A checkpoint directory is missing, incomplete, corrupted or of an unknown format."""


class TrainingError(Rl2EdgeError):
    """A training job failed while it ran: one of a data-parallel job's processes died or stopped answering."""


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


SHOWN_CHARS = 80
"""The most of a user's value an error message shows: a file may hold a megabyte in one value."""


class _ShortRepr(reprlib.Repr):
    """reprlib's bounded repr: a few items of each container, a few levels deep, so that the work is bounded
    too (the repr of a 9-level YAML alias bomb is 351 MB); ints too long for str() (Python 3.11+ refuses
    more than 4300 digits) as their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 3, 4, 4, 4, 4
        self.maxstring = self.maxother = self.maxlong = SHOWN_CHARS

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()


def short_repr(value: object, limit: int = SHOWN_CHARS) -> str:
    """repr(value) for an error message: at most `limit` characters (and a bounded effort) whatever the value."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # a repr that fails: say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, limit: int | None = None) -> str:
    """`text` from outside (a server's answer) without control characters (escape sequences that would
    drive the terminal) but newline and tab, each shown as \\xNN; cut to `limit` characters if given."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
