"""Loopback ports: where the demo, plc-sim, the tests, the benchmarks and a torchrun rendezvous bind."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the OS picks it; another process may still take it before
    the caller binds, which a server that retries its bind tolerates)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
