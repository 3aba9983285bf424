"""What the subcommands share: the one-line parse errors, the padded table of their summaries, OPC UA security options, a check
of output files, and the runner of the asyncio services."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rl2edge.errors import ConfigError
from rl2edge.tables import markdown_table

QUANT_MODES = ("fp32", "fp16", "dynamic", "int8")


class OneLineErrors(argparse.ArgumentParser):
    """A wrong option is one line and exit 2 (argparse's default prints the whole usage first, which pushes
    the reason off a journal's line); subcommands' parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    return markdown_table(headers, rows, pad=True)


def add_security_options(sp: argparse.ArgumentParser, role: str) -> None:
    g = sp.add_argument_group("security")
    g.add_argument(
        "--security",
        default="none",
        choices=["none", "sign", "sign_and_encrypt"],
        help="message security, Basic256Sha256 (default: none)",
    )
    g.add_argument("--cert", help="this application's certificate (DER/PEM; see `rl2edge certs`)")
    g.add_argument("--key", help="this application's private key (PEM)")
    if role == "client":
        g.add_argument("--server-cert", help="the PLC's certificate, trusted explicitly")
    else:
        g.add_argument("--trust", action="append", help="a client certificate to trust (repeatable)")
    g.add_argument("--user", help="username" + (" required of clients" if role == "server" else ""))
    g.add_argument(
        "--password-file", help="file whose first line is the password (else $RL2EDGE_OPCUA_PASSWORD)"
    )
    g.add_argument(
        "--allow-plaintext-password",
        action="store_true",
        help="with --security none, send (or accept) the password unencrypted; warned at every start",
    )


def security_config(args: argparse.Namespace, role: str) -> Any:
    from rl2edge.plc_bridge.security import SecurityConfig, read_password, redact_in_logs

    trusted = (
        [args.server_cert]
        if role == "client" and args.server_cert
        else list(getattr(args, "trust", None) or [])
    )
    password = read_password(args.password_file) if args.user else None
    redact_in_logs(password)
    sec = SecurityConfig(
        mode=args.security,
        certificate=Path(args.cert) if args.cert else None,
        private_key=Path(args.key) if args.key else None,
        trusted=tuple(Path(p) for p in trusted),
        username=args.user,
        password=password,
        allow_plaintext_password=args.allow_plaintext_password,
    )
    sec.check(role)
    return sec


def check_output_file(path: str | None, option: str) -> None:
    """Refuse at start, not at the end of a run whose result would then be lost, a path that cannot be written."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{option} {p} is a directory; name a file, e.g. {p / 'summary.json'}")
    if not p.parent.is_dir():
        raise ConfigError(f"{option} {p}: folder {p.parent} does not exist")
    if not os.access(p.parent, os.W_OK):
        raise ConfigError(f"{option} {p}: folder {p.parent} is not writable by this user")


def run_until_signal(coro_factory: Callable[[Any], Any]) -> Any:
    """Run an async service; SIGINT and SIGTERM set its stop event (a clean exit, code 0)."""
    import asyncio
    import signal

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await coro_factory(stop)

    return asyncio.run(main())
