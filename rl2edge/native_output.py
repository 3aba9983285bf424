"""Keep native libraries' console output out of the user's way.

TensorFlow's C++ and absl logging (`Unable to register cuDNN factory`, `W0000 ... Ignored output_format`),
the TFLite converter's `fully_quantize: 0, ...` printf and LiteRT's `INFO: Created TensorFlow Lite XNNPACK
delegate` write straight to file descriptors 1 and 2, under Python's sys.stdout and sys.stderr. While a
command runs without -v, those descriptors point at an unlinked temporary file; Python's own streams (the
progress bars, the log, the summary table) keep the terminal. If the command fails with an unexpected
exception, the captured text's tail is shown, since it may say why.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

SHOWN_ON_FAILURE = 40
"""Lines of captured native output shown when the command fails unexpectedly."""


@contextlib.contextmanager
def native_output_hidden(expected: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """`expected`: exceptions that are clear errors of their own (no native output is shown for them)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    sink = tempfile.TemporaryFile()
    old = sys.stdout, sys.stderr
    out = os.fdopen(saved[0], "w", buffering=1, encoding=old[0].encoding, errors=old[0].errors)
    err = os.fdopen(saved[1], "w", buffering=1, encoding=old[1].encoding, errors=old[1].errors)
    handlers = [h for h in logging.root.handlers if isinstance(h, logging.StreamHandler) and h.stream in old]
    streams = {id(old[0]): out, id(old[1]): err}
    restore = [(h, h.stream) for h in handlers]
    os.dup2(sink.fileno(), 1)
    os.dup2(sink.fileno(), 2)
    sys.stdout, sys.stderr = out, err
    for h, stream in restore:
        h.setStream(streams[id(stream)])
    unexpected = False
    try:
        yield
    except BaseException as exc:
        unexpected = not isinstance(exc, (*expected, KeyboardInterrupt, SystemExit))
        raise
    finally:
        _flush_c_stdio()
        out.flush()
        err.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        sys.stdout, sys.stderr = old
        for h, stream in restore:
            h.setStream(stream)
        out.close()
        err.close()
        if unexpected:
            _show_tail(sink)
        sink.close()


def _flush_c_stdio() -> None:
    """printf output still in the C library's buffer belongs in the sink, not on the restored terminal."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def _show_tail(sink: BinaryIO) -> None:
    sink.seek(0)
    lines = sink.read().decode(errors="replace").splitlines()
    if lines:
        tail = "\n".join(lines[-SHOWN_ON_FAILURE:])
        print(
            f"--- the native libraries' last {min(len(lines), SHOWN_ON_FAILURE)} lines ---\n{tail}",
            file=sys.stderr,
        )
