"""The `rl2edge` console script. Before anything else loads (the CLI's imports take some 25 ms), `serve`
blocks SIGHUP: a `systemctl reload` (or a deployer's SIGHUP) during start-up is then queued until the
service's handler takes it (plc_bridge.service), where the default action would end serve with 129.
What no Python code can cover is the interpreter's own start-up before this module runs."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    if command == "serve" and hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    from rl2edge.cli.app import main as cli_main

    return cli_main()
