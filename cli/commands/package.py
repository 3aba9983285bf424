"""`rl2edge package`: a verified artifact folder as an over-the-air update for a fleet (a signed Mender
module-image artifact that the `rl2edge-policy` update module installs; docs/fleet.md)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError

_logger = logging.getLogger("rl2edge.package")


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "package",
        help="an artifact as a fleet update (a signed .mender file)",
        formatter_class=fmt,
        description="Writes a Mender module-image artifact of type rl2edge-policy holding the verified "
        "artifact folder. Its provides record the manifest's sha256 and the observation/action layout's "
        "digest; it depends on the device serving that layout, so the Mender client refuses a policy "
        "with another layout before anything is written.",
        epilog="example (after `rl2edge export runs/cp --quantize int8 --out artifacts/cp`):\n"
        "  rl2edge package artifacts/cp --mender --device-type jetson-orin-nano "
        "--sign keys/mender.key --out cp-int8.mender",
    )
    s.add_argument("artifact", help="an artifact folder written by `rl2edge export` (holding manifest.json)")
    s.add_argument("--mender", action="store_true", help="write a Mender artifact (the one format so far)")
    s.add_argument(
        "--device-type",
        action="append",
        default=[],
        metavar="TYPE",
        help="a device type it installs on (the device's /var/lib/mender/device_type); repeat for several",
    )
    s.add_argument("--name", help="the artifact's name (default: ENV-MODE-<manifest sha256, 12 digits>)")
    s.add_argument("--sign", metavar="KEY", help="sign with this PEM private key (RSA or ECDSA)")
    s.add_argument(
        "--first",
        action="store_true",
        help="a device's first policy: no depends on a layout it serves (it serves none yet)",
    )
    s.add_argument("--out", help="the .mender file (default: ARTIFACT.mender beside the folder)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.runtime.mender_artifact import package

    if not args.mender:
        raise ConfigError("choose the update format: --mender (a Mender module-image artifact)")
    src = Path(args.artifact)
    out = Path(args.out) if args.out else src.with_name(src.resolve().name + ".mender")
    done = package(
        src, out, device_types=args.device_type, name=args.name, sign_key=args.sign, first=args.first
    )
    rows = [
        ("name", done.name),
        ("manifest sha256", done.manifest_sha256),
        ("layout digest", done.io_digest),
        ("depends on layout", "yes" if done.depends else "no (--first)"),
        ("signed", "yes" if done.signed else "no"),
    ]
    print(table(["written", str(done.path)], rows))
    return 0
