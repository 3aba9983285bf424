"""The `rl2edge` command. Each subcommand imports its package only when it runs, so that
`rl2edge evaluate` on the edge never loads torch and `rl2edge --help` is instant."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from rl2edge.cli.commands import COMMANDS
from rl2edge.cli.commands.common import OneLineErrors
from rl2edge.errors import Rl2EdgeError
from rl2edge.interrupts import Interrupted, interruptible
from rl2edge.native_output import native_output_hidden

WORKSTATION_EXTRAS = {"train": "rl2edge[train]", "export": "rl2edge[train]", "tune": "rl2edge[train,ray]"}
"""The commands an edge install cannot run, and the extra that brings everything each needs."""


def build_parser() -> argparse.ArgumentParser:
    import importlib

    p = OneLineErrors(
        prog="rl2edge",
        description="Train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="quick start:\n"
        "  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge evaluate artifacts/cp --env CartPole-v1 --episodes 20 --seed 0 --json",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    for name in COMMANDS:  # each module imports its packages only when its command runs
        importlib.import_module(f"rl2edge.cli.commands.{name}").add_parser(sub, fmt)
    return p


def _one_line_asyncua(record: logging.LogRecord) -> bool:
    if record.name.startswith("asyncua") and record.exc_info:
        kind = record.exc_info[0].__name__ if record.exc_info[0] else "error"
        record.msg = f"{record.msg} ({kind}; -v for the traceback)"
        record.exc_info = None
        record.exc_text = None
    return True


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`bench` passes options it does not know (and all after `--`) on to its script in `args.rest`;
    argparse.REMAINDER would swallow `--suite` after the optional ARTIFACT too."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "options_file", None):  # only the commands that registered an options file have it
        from rl2edge.cli.commands.config_file import apply_config_file

        args = apply_config_file(parser, argv, args)
    if args.command == "bench":
        args.rest = [*rest, *tail]
    elif rest or tail:
        parser.error(f"unrecognized arguments: {' '.join([*rest, *tail])}")
    return args


def _hold_reloads(argv: Sequence[str]) -> None:
    """serve: SIGHUP (`systemctl reload`) is blocked from here until the service's handler takes it
    (plc_bridge.service), so that a reload during start-up is queued, not the default's exit 129. The
    console script (rl2edge.cli.entry) does the same before this module's imports; this covers `main()` called
    otherwise. entry cannot share it: it may not import this module's imports, nor this module it."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command == "serve" and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})


def main(argv: Sequence[str] | None = None) -> int:
    _hold_reloads(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ start-up noise out
    try:
        args = parse_args(argv)
    except Rl2EdgeError as exc:  # an options file that does not check out
        print(f"rl2edge: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: --help (0), a wrong option (2, its one line already printed)
        return exc.code if isinstance(exc.code, int) else 2
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for noisy in ("tensorflow", "absl", "onnx2tf", "h5py", "matplotlib"):
        logging.getLogger(noisy).setLevel(max(level, logging.ERROR))
    # asyncua logs every Read and Write at INFO: 100 lines a second at a 20 ms period. Its warnings stay,
    # without the tracebacks it attaches to what rl2edge reports in one line itself (-v shows them).
    logging.getLogger("asyncua").setLevel(level if args.verbose else logging.WARNING)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_one_line_asyncua)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # `train --nproc` starts its ranks with it
    func: Callable[[argparse.Namespace], int] = args.func
    quiet: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if (
        args.command in ("train", "export", "evaluate") and not args.verbose
    ):  # TensorFlow's and LiteRT's noise
        quiet = native_output_hidden(expected=(Rl2EdgeError, Interrupted))
    try:
        with quiet:
            if args.command in ("train", "export"):  # they write: a stop request must clean up, not kill
                with interruptible(ignore_once_complete=True):
                    return func(args)
            return func(args)
    except Rl2EdgeError as exc:
        print(f"rl2edge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        what = exc.kept or "nothing was written (--out is as it was)"
        print(f"rl2edge {args.command}: interrupted by {exc}; {what}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"rl2edge {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # e.g. `train` or `evaluate` on the edge install, which has no torch
        root = (exc.name or "").split(".")[0]
        if args.command in WORKSTATION_EXTRAS:  # the whole extra at once, not one missing package a try
            extra = WORKSTATION_EXTRAS[args.command]
            fix = (
                f"`rl2edge {args.command}` runs on a workstation install: pip install '{extra}' (all it needs "
                "in one step; the edge install serves artifacts only)"
            )
        elif root == "gymnasium":  # evaluate and plc-sim need the environments only
            fix = "pip install 'gymnasium>=1.0,<1.3' (the environments alone; no training stack needed)"
        else:
            fix = "the edge install serves artifacts only: pip install 'rl2edge[train]' on a workstation for the rest"
        print(
            f"rl2edge {args.command}: error: this command needs the Python package {root!r}, which is not installed; {fix}",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
