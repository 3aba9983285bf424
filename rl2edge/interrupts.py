"""SIGINT and SIGTERM for the commands that write: an exception, so that every `with` block on the way
out removes its staging and temporary folders, and the command exits non-zero with `--out` as it was.

SIGTERM's default action ends the process at once (no cleanup); SIGINT's KeyboardInterrupt can be
swallowed when it is raised inside a finalizer or a callback of the converters (TensorFlow runs Python
callbacks from C++, where an exception is printed and dropped). So the signal is also remembered, and
`check_interrupted()`, called between stages and before anything is committed, raises it again.
A second signal while cleaning up is not raised again: cleanup finishes.

Once a command's result is renamed into place (`atomic_directory(..., completes=True)` calls `completed`),
the command has done its work: a stop request from then on (while the summary table prints, the
temporary folders go, the interpreter exits) is only noted, and the command exits 0 with the result kept.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

_logger = logging.getLogger(__name__)

_pending: int | None = None
_complete: str | None = None
"""What the command completed (`completed`): a stop request no longer undoes or fails anything."""
_deferred = 0
_active = False
"""Inside `interruptible()`: outside it, `deferred` and `completed` change nothing."""


class Interrupted(KeyboardInterrupt):
    """A stop request (SIGINT or SIGTERM); a KeyboardInterrupt so that `except Exception` lets it pass."""

    def __init__(self, signum: int):
        self.signum = signum
        # What a command that commits its results piece by piece (train --seeds) kept before the stop;
        # None: nothing was written, --out is as it was.
        self.kept: str | None = None
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending
    if _pending is not None:
        if _complete is None:
            _logger.warning(
                "%s again: still cleaning up, stopping as soon as that is done", signal.Signals(signum).name
            )
        return
    _pending = signum
    if _complete is None and not _deferred and not _in_finalizer(frame):
        raise Interrupted(signum)


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether the signal arrived inside a __del__ (TensorFlow's functions have them): an exception raised
    there is printed as "Exception ignored in ..." with a traceback and dropped, so it is not raised there;
    check_interrupted() raises it at the next stage instead."""
    for _ in range(32):
        if frame is None:
            return False
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def stop_request(exc: KeyboardInterrupt) -> Interrupted:
    """`exc` as the stop request it stands for: itself, or, for the plain KeyboardInterrupt a library raises
    in the signal's place (Ray's ray.wait and ray.get do), the signal that is pending (SIGTERM included),
    else SIGINT (a Ctrl-C that reached Python before any handler of this module)."""
    if isinstance(exc, Interrupted):
        return exc
    return Interrupted(_pending if _pending is not None else signal.SIGINT)


def check_interrupted() -> None:
    """Raise the stop request again if one arrived and was swallowed on its way out (or deferred), unless
    the command's result is complete."""
    if _pending is not None and _complete is None:
        raise Interrupted(_pending)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A stop request waits until the block is done (renames that belong together), then is raised."""
    global _deferred
    if not _active or threading.current_thread() is not threading.main_thread():
        yield  # signals are handled in the main thread only: a stop request cannot land in this block
        return
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1
    if not _deferred:
        check_interrupted()


def completed(what: str) -> None:
    """The command's result is in place and whole (`what`: "ART is complete"): from here on a stop request
    neither fails the command nor removes anything. Called inside `deferred()`, in the rename's block."""
    global _complete
    if _active:
        _complete = what


@contextlib.contextmanager
def interruptible(ignore_once_complete: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` in the main thread for the duration of the block.

    `ignore_once_complete`: if the block completed its result (`completed`), SIGINT and SIGTERM stay
    ignored after it instead of getting their previous handlers back: for the CLI, whose process only
    exits then, and whose interpreter shutdown a default SIGTERM would still turn into exit 143."""
    global _pending, _complete, _deferred, _active
    _pending, _complete, _deferred, _active = None, None, 0, True
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, _handler)
    try:
        yield
        check_interrupted()  # one that was swallowed in the last stage
    except Exception as exc:
        # A stop request that landed inside a C extension's import comes out as "ImportError:
        # initialization failed" (and inside a converter's callback, as that library's own error): it is
        # the stop request still, reported and exited for as one.
        if _pending is not None and _complete is None:
            raise Interrupted(_pending) from exc
        raise
    except KeyboardInterrupt as exc:
        # A library's plain KeyboardInterrupt in the signal's place: reported as that signal (exit 143 for
        # SIGTERM, not 130); with no signal pending it stays the Ctrl-C it is.
        if isinstance(exc, Interrupted) or _pending is None:
            raise
        raise stop_request(exc) from exc
    finally:
        done = _complete is not None
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if done and ignore_once_complete else h)
        _active = False
        if done and _pending is not None:
            _logger.warning(
                "%s arrived after the work was done: %s, kept as it is",
                signal.Signals(_pending).name,
                _complete,
            )
        _complete = None


@contextlib.contextmanager
def handlers_kept() -> Iterator[None]:
    """Put this module's handlers back if a library replaced them inside the block: ray.init makes SIGTERM
    exit the driver at once (sys.exit(15): no summary of what was kept, exit 15)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for s, h in before.items():
                if h is _handler and signal.getsignal(s) is not _handler:
                    signal.signal(s, _handler)
