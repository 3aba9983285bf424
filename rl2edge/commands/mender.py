"""`rl2edge mender install-module`: put the `rl2edge-policy` update module and its inventory script
where the Mender client looks for them (docs/fleet.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from rl2edge import bounded
from rl2edge.commands.common import table
from rl2edge.errors import ConfigError
from rl2edge.fileio import write_bytes_atomic

MODULES_DIR = "/usr/share/mender/modules/v3"
INVENTORY_DIR = "/usr/share/mender/inventory"


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "mender",
        help="install the Mender update module for rl2edge policies on a device",
        formatter_class=fmt,
        description="install-module writes the update module rl2edge-policy (it installs a policy beside "
        "the serving one, swaps serve's watched symlink, commits once serve answers the PLC with it and "
        "rolls back when serve refuses it) and the inventory script mender-inventory-rl2edge.",
        epilog="example:\n  sudo rl2edge mender install-module --serve-config /etc/rl2edge/serve.yaml",
    )
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")
    i = actions.add_parser("install-module", help="write the update module and the inventory script")
    i.add_argument(
        "--serve-config",
        default="/etc/rl2edge/serve.yaml",
        help="serve's config file: its artifact symlink and metrics port (default: /etc/rl2edge/serve.yaml)",
    )
    i.add_argument(
        "--commit-timeout",
        type=bounded.COMMIT_TIMEOUT_S,
        default=300.0,
        help="seconds to wait for serve to take a new policy over before the update fails and rolls back "
        "(default: 300; longer than serve's watch interval and shadow run)",
    )
    i.add_argument("--keep", type=bounded.KEEP, default=3, help="installed policies kept (default: 3)")
    i.add_argument("--modules-dir", default=MODULES_DIR, help=f"default: {MODULES_DIR}")
    i.add_argument("--inventory-dir", default=INVENTORY_DIR, help=f"default: {INVENTORY_DIR}")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.mender_module import MODULE_NAME, target_of

    config = Path(args.serve_config).resolve()
    target = target_of(config)  # refuses a config without watch or metrics now, not at the first update
    python = shlex.quote(sys.executable)
    module = (
        "#!/bin/sh\n"
        "# The Mender update module for rl2edge policies (written by `rl2edge mender install-module`).\n"
        f"exec {python} -m rl2edge.plc_bridge.mender_module --serve-config {shlex.quote(str(config))} "
        f'--commit-timeout {args.commit_timeout:g} --keep {args.keep} "$@"\n'
    )
    inventory = (
        "#!/bin/sh\n"
        "# Mender inventory: the rl2edge policy this device serves (written by `rl2edge mender install-module`).\n"
        f"exec {python} -m rl2edge.plc_bridge.mender_inventory --serve-config {shlex.quote(str(config))}\n"
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
