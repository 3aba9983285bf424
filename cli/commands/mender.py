"""`rl2edge mender`: the device side of a fleet roll-out through Mender (docs/fleet.md).

- `install-module` puts the update module `rl2edge-policy` and the inventory script where the Mender client
  looks for them: two small scripts that run `rl2edge mender state` and `rl2edge mender inventory`;
- `state STATE FILES` is what the client runs for each state of an update (plc_bridge.mender_module);
- `inventory` prints the policy this device serves, for the Mender server (plc_bridge.mender_inventory).

Each reads serve's own config file through serve's own parser, so the module swaps the symlink serve
watches and reads the metrics port serve exports, whatever the file says now."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl2edge import bounded
from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError, Rl2EdgeError
from rl2edge.fileio import write_bytes_atomic

if TYPE_CHECKING:
    from rl2edge.plc_bridge.mender_module import Target

MODULES_DIR = "/usr/share/mender/modules/v3"
INVENTORY_DIR = "/usr/share/mender/inventory"
SERVE_CONFIG = "/etc/rl2edge/serve.yaml"


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "mender",
        help="install the Mender update module for rl2edge policies on a device",
        formatter_class=fmt,
        description="install-module writes the update module rl2edge-policy (it installs a policy beside "
        "the serving one, swaps serve's watched symlink, commits once serve answers the PLC with it and "
        "rolls back when serve refuses it) and the inventory script mender-inventory-rl2edge.",
        epilog=f"example:\n  sudo rl2edge mender install-module --serve-config {SERVE_CONFIG}",
    )
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")
    i = actions.add_parser("install-module", help="write the update module and the inventory script")
    _serve_config_option(i)
    _module_options(i)
    i.add_argument("--modules-dir", default=MODULES_DIR, help=f"default: {MODULES_DIR}")
    i.add_argument("--inventory-dir", default=INVENTORY_DIR, help=f"default: {INVENTORY_DIR}")
    st = actions.add_parser("state", help="one state of an update, as the Mender client calls the module")
    _serve_config_option(st)
    _module_options(st)
    st.add_argument("state", help="the client's state (ArtifactInstall, ArtifactCommit, ...)")
    st.add_argument("files", nargs="?", type=Path, help="the folder the client gives the state")
    inv = actions.add_parser("inventory", help="the serving policy as Mender inventory lines")
    _serve_config_option(inv)
    s.set_defaults(func=run)


def _serve_config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--serve-config",
        default=SERVE_CONFIG,
        help=f"serve's config file: its artifact symlink and metrics port (default: {SERVE_CONFIG})",
    )


def _module_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--commit-timeout",
        type=bounded.COMMIT_TIMEOUT_S,
        default=300.0,
        help="seconds to wait for serve to take a new policy over before the update fails and rolls back "
        "(default: 300; longer than serve's watch interval and shadow run)",
    )
    p.add_argument("--keep", type=bounded.KEEP, default=3, help="installed policies kept (default: 3)")


def target_of(serve_config: Path) -> Target:
    """serve's artifact path and metrics endpoint, as serve itself reads its config file."""
    from rl2edge.cli.commands.serve import read_config_file
    from rl2edge.plc_bridge.mender_module import Target

    if not serve_config.is_file():
        raise ConfigError(f"serve's config file {serve_config} does not exist")
    try:
        args = read_config_file(serve_config)
    except SystemExit:  # argparse printed its one line
        raise ConfigError(f"{serve_config}: serve would refuse this config file") from None
    if not args.watch:
        raise ConfigError(f"{serve_config}: serve must watch its artifact path (watch: true)")
    if not args.metrics_port:
        raise ConfigError(f"{serve_config}: serve must export metrics (metrics_port: 9464)")
    host = args.metrics_host or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return Target(Path(args.artifact), f"http://{host}:{args.metrics_port}")


def run(args: argparse.Namespace) -> int:
    config = Path(args.serve_config)
    if args.action == "state":
        from rl2edge.plc_bridge.mender_module import MODULE_NAME, run_state

        try:
            answer = run_state(
                args.state, args.files, lambda: target_of(config), args.commit_timeout, args.keep
            )
        except Rl2EdgeError as exc:  # one line for the client's log; any non-zero exit fails the state
            print(f"{MODULE_NAME} {args.state}: {exc}", file=sys.stderr)
            return 1
        if answer:
            print(answer)
        return 0
    if args.action == "inventory":
        from rl2edge.plc_bridge.mender_inventory import lines

        try:
            out = lines(target_of(config))
        except Rl2EdgeError as exc:
            print(f"mender-inventory-rl2edge: {exc}", file=sys.stderr)
            return 1
        print("\n".join(" ".join(line.split()) for line in out))
        return 0
    return install_module(args, config.resolve())


def _rl2edge_command() -> str:
    """How a script runs this rl2edge: its console script beside this Python, else this Python itself."""
    script = Path(sys.executable).with_name("rl2edge")
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m rl2edge.cli"


def install_module(args: argparse.Namespace, config: Path) -> int:
    from rl2edge.plc_bridge.mender_module import MODULE_NAME

    target = target_of(config)  # refuses a config without watch or metrics now, not at the first update
    link = target.link
    if link.exists() and not link.is_symlink():  # the module would refuse it at the first update: now
        raise ConfigError(
            f"serve's artifact path {link} is a folder, not a symlink: the module swaps a symlink in one rename "
            f"(mv {link} {link.parent}/first && ln -s first {link}), then run install-module again"
        )
    rl2edge, conf = _rl2edge_command(), shlex.quote(str(config))
    module = (
        "#!/bin/sh\n"
        "# The Mender update module for rl2edge policies (written by `rl2edge mender install-module`).\n"
        f"exec {rl2edge} -q mender state --serve-config {conf} "
        f'--commit-timeout {args.commit_timeout:g} --keep {args.keep} "$@"\n'
    )
    inventory = (
        "#!/bin/sh\n"
        "# Mender inventory: the rl2edge policy this device serves (written by `rl2edge mender install-module`).\n"
        f"exec {rl2edge} -q mender inventory --serve-config {conf}\n"
    )
    written = []
    for folder, name, text in (
        (args.modules_dir, MODULE_NAME, module),
        (args.inventory_dir, "mender-inventory-rl2edge", inventory),
    ):
        path = Path(folder) / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path, text.encode(), mode=0o755)
        except PermissionError:
            raise ConfigError(f"cannot write {path}: run it as root (sudo)") from None
        written.append((name, str(path)))
    rows = [*written, ("serve's symlink", str(target.link)), ("serve's metrics", target.metrics)]
    print(table(["installed", "where"], rows))
    return 0
