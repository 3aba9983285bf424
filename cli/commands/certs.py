"""`rl2edge certs`: a self-signed OPC UA application certificate and key."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rl2edge import bounded


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    c = sub.add_parser(
        "certs",
        help="make a self-signed OPC UA application certificate and key",
        formatter_class=fmt,
        description="For tests and commissioning: a self-signed application certificate (DER) with the "
        "application URI and host in subjectAltName, and its RSA key (PEM, mode 0600).",
        epilog="example:\n  rl2edge certs --out pki --name serve && rl2edge certs --out pki --name plc",
    )
    c.add_argument("--out", required=True, help="directory for NAME.der and NAME.key.pem")
    c.add_argument("--name", required=True, help="application name (the certificate's CN)")
    c.add_argument("--uri", help="application URI (default: urn:rl2edge:NAME)")
    c.add_argument("--host", help="host name in subjectAltName (default: this host)")
    c.add_argument("--days", type=bounded.DAYS, default=365, help="validity (default: 365)")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.security import make_certificate

    out = Path(args.out)
    cert, key = make_certificate(out, args.name, args.uri or f"urn:rl2edge:{args.name}", args.host, args.days)
    print(f"certificate: {cert}\nprivate key: {key} (keep it secret; mode 0600)")
    return 0
