"""Atomic file and directory writes, and hashing.

Every output the project writes goes through here, so that an interrupted or failed command never
leaves a half-written checkpoint or artifact behind: write to a temporary sibling, then rename.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError, printable, short_repr


def read_regular_file(
    path: str | os.PathLike[str], max_bytes: int, what: str, error: type[Exception]
) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, checked on the opened file before any read:
    a FIFO, a device or a directory is refused without blocking, and so is a file over the limit (a sparse
    1 GB file would otherwise be read into memory first). `error(message)` says which."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"cannot open {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path} is not a regular file")
        if st.st_size > max_bytes:
            raise error(f"{path} has {st.st_size} bytes, over the {max_bytes} a {what} may have")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while being read
        raise error(f"{path} has over {max_bytes} bytes, the most a {what} may have")
    return data


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """`mode` is set before the rename, so a secret (0o600) is never readable by others, not even for a
    moment; mkstemp's own 0600 would make every artifact unreadable to the service user on the device."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str | os.PathLike[str], obj: Any, inline_scalar_lists: bool = False) -> None:
    """`obj` as indented JSON. `inline_scalar_lists`: a list of numbers, strings, booleans or nulls on one
    line rather than one line per item (a manifest's per-value statistics: a 128x128x3 camera key's took
    4 MiB indented, the runtime's limit)."""
    text = json_text(obj) if inline_scalar_lists else json.dumps(obj, indent=2, sort_keys=False)
    write_bytes_atomic(path, (text + "\n").encode())


def json_text(obj: Any, level: int = 0) -> str:
    """json.dumps(obj, indent=2), except that lists of scalars stay on one line."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, (list, tuple)) and obj:
        if all(v is None or isinstance(v, (bool, int, float, str)) for v in obj):
            return json.dumps(list(obj))
        return "[\n" + ",\n".join(f"{inner}{json_text(v, level + 1)}" for v in obj) + f"\n{pad}]"
    return json.dumps(obj)


def check_output_dir(path: str | os.PathLike[str], *, force: bool, what: str) -> Path:
    """Refuse to overwrite a non-empty directory unless asked to (`--force`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} output {path} exists and is not a directory; choose another --out")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise ConfigError(
            f"{what} output directory {path} is not empty; choose another --out or pass --force to replace it"
        )
    return path


@contextlib.contextmanager
def atomic_directory(final: str | os.PathLike[str], *, completes: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `final`; on success it replaces `final` in one rename.

    On any exception the temporary directory is removed and `final` is left as it was. A stop request
    (rl2edge.interrupts) waits while the previous `final` is moved aside and the new one into place.
    `completes`: `final` is the command's whole result; once it is in place a stop request no longer
    fails the command (see `interrupts.completed`).
    """
    from rl2edge.interrupts import completed, deferred

    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        with deferred():
            old = None
            if final.exists():
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                os.replace(final, old)
            try:
                os.replace(tmp, final)
            except BaseException:
                if old is not None:
                    os.replace(old, final)
                raise
            if completes:
                completed(f"{final} is complete")
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already if it was renamed into place
        raise


MAX_JSON_NESTING = 32
"""A manifest or checkpoint.json nests 5 levels deep. The C JSON parser recurses once per level, and a library in the
process may have raised Python's recursion limit (onnx2tf does): a 200,000-deep array then overflows
the C stack and kills the process with SIGSEGV instead of raising RecursionError. So depth is counted
first, without recursion."""
_JSON_TOKENS = re.compile(r'\\.|"|[\[\]{}]', re.S)


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    in_string = False
    for m in _JSON_TOKENS.finditer(text):
        token = m.group()
        if token == '"':
            in_string = not in_string
        elif in_string or token[0] == "\\":
            continue
        elif token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def read_json_document(
    path: Path,
    *,
    what: str,
    kind: tuple[str, str],
    version: tuple[str, int],
    required: Sequence[str],
    error: type[Exception],
    fix: str,
    max_bytes: int = 4 << 20,
) -> dict[str, Any]:
    """checkpoint.json and manifest.json: a JSON object that names its kind and version (`kind` and
    `version`: the field and the value expected) and holds `required`, read with its size and nesting
    bounded before parsing; else one line of `error` that ends in `fix`."""
    try:
        text = read_regular_file(path, max_bytes, what, error).decode()
        if _nesting_depth(text) > MAX_JSON_NESTING:
            raise error(f"{path} nests deeper than {MAX_JSON_NESTING} levels: not a {what}; {fix}")
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path} is not valid JSON ({exc}); {fix}") from None
    except ValueError as exc:  # an integer of more than 4300 digits (Python 3.11+ refuses to convert it)
        raise error(
            f"{path} holds a number that cannot be read ({printable(str(exc), 120)}); {fix}"
        ) from None
    (kind_key, kind_value), (version_key, version_value) = kind, version
    if not isinstance(data, dict) or data.get(kind_key) != kind_value:
        raise error(f"{path} is not an rl2edge {what} ({kind_key} field missing or wrong)")
    if data.get(version_key) != version_value:
        raise error(
            f"{path} has {version_key} {short_repr(data.get(version_key))}; this rl2edge reads version {version_value}: {fix}"
        )
    missing = [k for k in required if k not in data]
    if missing:
        raise error(f"{path} lacks {', '.join(missing)}; {fix}")
    return data


MAX_YAML_BYTES = 1 << 20
"""Node maps and hyperparameter files are a few KB: a bigger one is refused unread."""


MAX_YAML_NESTING = 64
"""PyYAML parses nesting by recursion, and onnx2tf raises Python's recursion limit to 2**31 - 1 in any
process that imported it: a file of 100,000 `[` then took 100 s instead of a RecursionError. Counted first;
brackets inside quoted strings count too, which only makes the bound stricter than needed."""


def _flow_depth(text: str) -> int:
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


class _AliasRefused(Exception):
    def __init__(self, anchor: str, line: int, column: int):
        super().__init__(anchor)
        self.anchor, self.line, self.column = anchor, line, column


def _no_alias_loader() -> type:
    """yaml.SafeLoader that refuses aliases (`*name`): nine nested lists of nine aliases each are a
    300-byte file that expands to 387 million items (a "billion laughs"), past every bound on the file's
    size and depth. No rl2edge file needs one: its values are short enough to write out."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _AliasRefused(str(event.anchor), event.start_mark.line + 1, event.start_mark.column + 1)
            return super().compose_node(parent, index)

    return NoAliasLoader


def load_yaml(path: str | os.PathLike[str], what: str) -> Any:
    """A YAML file's content, or a one-line ConfigError that names the file and what is wrong with it.
    Aliases are refused (see `_no_alias_loader`)."""
    import yaml

    path = Path(path)
    try:
        if not path.exists():
            raise FileNotFoundError
        # a regular file, its size checked before any read: a FIFO or a device is refused, not waited on
        text = read_regular_file(path, MAX_YAML_BYTES, what, ConfigError).decode()
        if _flow_depth(text) > MAX_YAML_NESTING:
            raise ConfigError(f"{what} {path} nests brackets deeper than {MAX_YAML_NESTING} levels")
        return yaml.load(text, Loader=_no_alias_loader())  # a SafeLoader without aliases
    except _AliasRefused as exc:
        raise ConfigError(
            f"{what} {path} uses a YAML alias (*{printable(exc.anchor, 40)}) at line {exc.line}, "
            f"column {exc.column}; write the value out"
        ) from None
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path} nests too deeply to be a {what}") from None
    except (ValueError, OverflowError) as exc:  # a constructor's: an int of 5000 digits, a 13th month
        why = printable(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, 160)
        raise ConfigError(f"{what} {path} holds a value that cannot be read ({why})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
        raise ConfigError(f"{what} {path} is not valid YAML{where}: {problem}") from None
