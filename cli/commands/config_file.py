"""An options file: a YAML mapping of a command's own options (`period_ms: 20`, the positional `artifact`
too), given as `--config FILE` to the commands that register it here (serve). The command line overrides
the file; relative paths in the file are relative to the file's folder (a systemd unit starts in /).

It lands in `args.options_file`, never `args.config`: train's and tune's `--config` is a hyperparameter
file, which their runs read themselves."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rl2edge import bounded
from rl2edge.errors import ConfigError, short_repr
from rl2edge.fileio import load_yaml

_NOT_OPTIONS = {"help", "options_file", "func"}


def add_config_option(parser: argparse.ArgumentParser, example: str, paths: Iterable[str]) -> None:
    """`paths`: the options (dest names) whose values are file paths."""
    parser.add_argument(
        "--config",
        dest="options_file",
        metavar="FILE",
        help=f"YAML file of options (the command line overrides it), e.g. {example}",
    )
    parser.set_defaults(config_parser=parser, config_paths=tuple(paths))


def apply_config_file(
    top: argparse.ArgumentParser, argv: Sequence[str], args: argparse.Namespace
) -> argparse.Namespace:
    """args with the file's options as defaults under the command line's."""
    sub: argparse.ArgumentParser = args.config_parser
    paths: Iterable[str] = args.config_paths
    path = Path(args.options_file)
    data = load_yaml(path, "config file")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path}: expected a mapping of option: value (e.g. period_ms: 20), got {type(data).__name__}"
        )
    actions = {a.dest: a for a in sub._actions if a.dest not in _NOT_OPTIONS and a.dest != argparse.SUPPRESS}
    path_options = set(paths)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(
                f"config file {path}: option names are words (period_ms), not {short_repr(key)}"
            )
        dest = key.replace("-", "_")
        if dest not in actions:
            near = difflib.get_close_matches(dest, list(actions), n=1)
            hint = f" (did you mean {near[0]}?)" if near else f"; options: {', '.join(sorted(actions))}"
            raise ConfigError(f"config file {path}: unknown option {short_repr(key)}{hint}")
        values[dest] = _convert(path, key, value, actions[dest])
        if dest in path_options and values[dest] is not None:
            values[dest] = _relative_to(path.parent, values[dest])
    sub.set_defaults(**values)
    again, _ = top.parse_known_args(list(argv))
    return again


def _convert(path: Path, key: str, value: Any, action: argparse.Action) -> Any:
    where = f"config file {path}: {key}"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, not {short_repr(value)}")
        return value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_scalar(where, v, action) for v in items]
    if value is None:
        return None
    return _scalar(where, value, action)


def _scalar(where: str, value: Any, action: argparse.Action) -> Any:
    if isinstance(value, (dict, list)) or isinstance(value, bool):
        raise ConfigError(f"{where} must be a single {_kind(action)}, not {short_repr(value)}")
    convert = action.type if callable(action.type) else str
    try:
        out = convert(str(value))
    except argparse.ArgumentTypeError as exc:  # a bounded option (rl2edge.bounded) says what it allows
        raise ConfigError(f"{where}: {exc}") from None
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be {_kind(action)}, not {short_repr(value)}") from None
    if action.choices is not None and out not in action.choices:
        raise ConfigError(f"{where}: {short_repr(value)} is not one of {', '.join(map(str, action.choices))}")
    return out


def _kind(action: argparse.Action) -> str:
    if action.type is int or isinstance(action.type, bounded.Integer):
        return "an integer"
    return "a number" if action.type is float or isinstance(action.type, bounded.Number) else "a string"


def _relative_to(folder: Path, value: Any) -> Any:
    if isinstance(value, list):
        return [_relative_to(folder, v) for v in value]
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else folder / p)
