"""systemd's service notification protocol (sd_notify(3)), for `Type=notify` units with `WatchdogSec=`.

Datagrams of `KEY=value` lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a leading `@` is an
abstract socket). $WATCHDOG_USEC is the watchdog interval; $WATCHDOG_PID, when set, names the process
that must pet it. Nothing happens when serve is not started by systemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable

_logger = logging.getLogger(__name__)


class SystemdNotifier:
    def __init__(self, address: str, watchdog_s: float | None):
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self.watchdog_s = watchdog_s
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._sock.setblocking(False)
        self._warned = False

    @classmethod
    def from_environment(cls) -> SystemdNotifier | None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        if not address or address[0] not in "/@":
            return None
        watchdog_s = None
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog_s = int(usec) / 1e6
        return cls(address, watchdog_s)

    def notify(self, *fields: str) -> None:
        try:
            self._sock.sendto("\n".join(fields).encode(), self.address)
        except OSError as exc:  # systemd gone or the socket full: never the control loop's problem
            if not self._warned:
                _logger.warning("cannot notify systemd at %s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
                self._warned = True

    async def pet_while(self, alive: Callable[[], bool], stop: asyncio.Event) -> None:
        """WATCHDOG=1 every half interval while `alive()` (the control loop shows progress). A blocked
        event loop sends nothing either: both are what the watchdog is for."""
        if self.watchdog_s is None:
            return
        while not stop.is_set():
            if alive():
                self.notify("WATCHDOG=1")
            try:
                await asyncio.wait_for(stop.wait(), self.watchdog_s / 2)
            except (TimeoutError, asyncio.TimeoutError):
                pass

    def close(self) -> None:
        self._sock.close()
