"""The HTTP side of `rl2edge serve --metrics-port`: a small GET-only server on its own event loop in its
own daemon thread, so that no scrape, flood or slow client runs on the control loop's event loop.

One request per connection (`Connection: close`), every client held to `HttpLimits`:
- at most `max_connections` served at once; a connection past them is answered 503 unread;
- the request line and headers within `max_request_bytes` (else 431), complete within
  `request_timeout_s` (else 408), well formed (else 400); a method other than GET or HEAD gets 405, an
  unknown path 404;
- once answered, a connection leaves its slot and waits (a second at most, `max_closing` of them) for
  the client to close, its further bytes dropped; past that it is reset;
- the thread keeps to `cpu_share` of a core, in bursts of at most a millisecond of work: what it holds of
  the GIL it holds from the control loop's thread.
A refusal is logged as one WARNING line per kind, then at most one more per kind every `log_every_s`
with the count of those not logged; a client never causes a traceback. The thread touches nothing of the
control loop's: `respond` (plc_bridge.metrics) reads the snapshot the loop publishes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_logger = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
"""(HTTP status, content type, body)."""

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
REFUSALS = ("busy", "timeout", "too_large", "malformed", "incomplete")
"""The kinds of refused clients, each counted and logged on its own (`HttpPort.refused`)."""

_TEXT = "text/plain; charset=utf-8"
_BACKLOG = 64
"""The listen queue, and the most connections asyncio accepts in one go (one burst of work)."""
PACE_BURST_S = 1e-3
"""The thread's CPU time between two checks of its share (`HttpPort._pace`)."""
_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_REQUEST_LINE = re.compile(rb"([A-Z]{1,16}) ([\x21-\x7e]{1,8000}) HTTP/(\d)\.(\d)\r?")
_HEADER_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[^\r\n]*\r?")


@dataclass(frozen=True)
class HttpLimits:
    max_connections: int = 32
    """Connections served at once; Prometheus scrapes one at a time, a probe or two more."""
    max_request_bytes: int = 8192
    """The request line and headers (a scrape's are some 200 bytes)."""
    request_timeout_s: float = 2.0
    """To receive a whole request, and again to hand over the answer."""
    max_closing: int = 128
    """Connections answered and waiting for the client to close (a second at most), beside the ones
    served: an answered connection leaves its serving slot at once. A connection over `max_connections`
    is answered 503 while there is room here, and reset unanswered past it."""
    log_every_s: float = 10.0
    """At most one WARNING per kind of refusal this often."""
    cpu_share: float = 0.2
    """The most of a core the server's thread takes: past a millisecond of work it sleeps to keep to it,
    which also frees the GIL for the control loop's thread. A flood is served more slowly (what waits,
    waits in the kernel's queues); scrapes and probes never come near it."""


class _RefusalLog:
    """One WARNING per kind at once, then at most one per kind every `every_s`, with the count of those
    not logged and the latest of them. Runs on the server's event loop only. Each record carries the kind
    as `record.refusal`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every_s: float):
        self.loop, self.every_s = loop, every_s
        self._held: dict[str, int] = {}
        """Kinds in their quiet window -> refusals not logged in it."""
        self._latest: dict[str, tuple[str, tuple[Any, ...]]] = {}

    def note(self, kind: str, text: str, *args: Any) -> None:
        if kind in self._held:
            self._held[kind] += 1
            self._latest[kind] = (text, args)
            return
        _logger.warning("metrics port: " + text, *args, extra={"refusal": kind})  # noqa: G003  # ours
        self._held[kind] = 0
        self.loop.call_later(self.every_s, self._flush, kind)

    def _flush(self, kind: str) -> None:
        count = self._held.pop(kind, 0)
        if count:
            text, args = self._latest.pop(kind)
            _logger.warning(
                "metrics port: %d more in the last %g s, the latest: " + text,  # noqa: G003  # ours
                count,
                self.every_s,
                *args,
                extra={"refusal": kind},
            )
            self._held[kind] = 0
            self.loop.call_later(self.every_s, self._flush, kind)


class HttpPort:
    """The server: `start` binds and starts the thread, `close` stops it. `respond(method, path)` runs in
    the server's thread and must only read what another thread published."""

    def __init__(self, respond: Callable[[str, str], Response], limits: HttpLimits = HttpLimits()):
        self.respond, self.limits = respond, limits
        self.refused = dict.fromkeys(REFUSALS, 0)
        """Refused clients by kind, written by the server's thread."""
        self.active = 0
        self.peak_active = 0
        """Connections served at once, now and at most so far."""
        self.closing = 0
        """Connections answered, waiting for the client to close."""
        self.address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[_Connection] = set()
        self._log: _RefusalLog | None = None
        self._closing = threading.Lock()
        self._stop_sent = False
        self._burst_cpu = self._burst_wall = 0.0

    # ------------------------------------------------------------------------------------- control
    def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; the bound (host, port). An OSError of the bind is raised here."""
        bound: concurrent.futures.Future[tuple[str, int]] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._serve, args=(host, port, bound), name="rl2edge-metrics", daemon=True
        )
        self._thread.start()
        self.address = bound.result()
        return self.address

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop serving, drop the connections still open, and end the thread (idempotent)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with self._closing:
            if not self._stop_sent and thread.is_alive():
                self._stop_sent = True
                loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

    # ------------------------------------------------------------------------------------- thread
    def _serve(self, host: str, port: int, bound: concurrent.futures.Future) -> None:
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(self._loop_error)
        self._log = _RefusalLog(loop, self.limits.log_every_s)
        try:
            server = loop.run_until_complete(
                loop.create_server(lambda: _Connection(self), host, port, backlog=_BACKLOG)
            )
        except BaseException as exc:  # the bind's OSError (port in use, no such address): the caller's
            loop.close()
            bound.set_exception(exc)
            return
        self._loop = loop
        name = server.sockets[0].getsockname()
        bound.set_result((str(name[0]), int(name[1])))
        try:
            loop.run_forever()
        finally:
            server.close()
            for conn in list(self._conns):
                conn.drop()
            loop.call_soon(loop.stop)
            loop.run_forever()  # once more: their connection_lost callbacks
            loop.close()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own errors on this loop (say, out of file descriptors in a flood): one line."""
        exc = context.get("exception")
        assert self._log is not None
        self._log.note("internal", "%s (%s)", context.get("message", "error"), exc)
        _logger.debug("metrics port: %s", context.get("message"), exc_info=exc)

    # ------------------------------------------------------------------------------- per request
    def _pace(self) -> None:
        """Called before each piece of work: once a burst has taken PACE_BURST_S of this thread's CPU,
        sleep long enough to keep within `cpu_share` since the burst began. A burst of work holds the GIL
        from the control loop's thread, in the worst case for the whole burst: it must stay short."""
        used = time.thread_time() - self._burst_cpu
        if used < PACE_BURST_S:
            return
        pause = used / self.limits.cpu_share - (time.monotonic() - self._burst_wall)
        if pause > 0:
            time.sleep(pause)  # blocks this thread's own event loop only: deliberate
        self._burst_cpu, self._burst_wall = time.thread_time(), time.monotonic()

    def _refuse(self, kind: str, peer: str, text: str, *args: Any) -> None:
        self.refused[kind] += 1
        assert self._log is not None
        self._log.note(kind, text + "; client %s", *args, peer)

    def _answer(self, method: str, path: str) -> Response:
        try:
            return self.respond(method, path)
        except Exception as exc:  # a bug of ours, not the client's: 500, logged (rate-limited) with its cause
            assert self._log is not None
            self._log.note(
                "internal", "answering %s %r failed: %s: %s", method, path[:80], type(exc).__name__, exc
            )
            _logger.debug("metrics port: answering %s %r failed", method, path[:80], exc_info=True)
            return 500, _TEXT, b"internal error\n"


class _Connection(asyncio.Protocol):
    """One client: read the head within the limits, answer once, close. After the answer our side is shut
    and the client's bytes (a body, the rest of an oversized head, a request sent to a busy server) read
    and dropped until it closes, a second at most: closing on unread bytes would reset the connection, and
    the client might lose the answer."""

    def __init__(self, port: HttpPort):
        self.port = port
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.head = bytearray()
        self.answered = False
        self.slot: str | None = None
        """"served" (counted in port.active), "closing" (in port.closing), or None."""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.port._pace()
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        port, limits = self.port, self.port.limits
        port._conns.add(self)
        if port.active < limits.max_connections:
            self._take("served")
            self._arm(limits.request_timeout_s)
            return
        port._refuse(
            "busy",
            self.peer,
            "a connection over the limit of %d at once, answered 503",
            limits.max_connections,
        )
        self._send(503, _TEXT, b"busy: too many connections, retry later\n", extra="Retry-After: 1\r\n")

    def data_received(self, data: bytes) -> None:
        self.port._pace()
        if self.answered:
            return  # dropped
        start = max(0, len(self.head) - 3)
        self.head += data
        limit = self.port.limits.max_request_bytes
        end = _END_OF_HEAD.search(self.head, start)
        if (end is None and len(self.head) > limit) or (end is not None and end.end() > limit):
            self.port._refuse("too_large", self.peer, "a request head over %d bytes, answered 431", limit)
            self._send(431, _TEXT, f"request head over {limit} bytes\n".encode())
        elif end is not None:
            self._request(bytes(self.head[: end.start()]))

    def eof_received(self) -> bool:
        self.port._pace()
        if self.answered:  # the client is done with our answer
            self._close()
        elif self.head.strip():
            self.port._refuse(
                "incomplete", self.peer, "a request cut short (%d bytes), answered 400", len(self.head)
            )
            self._send(400, _TEXT, b"bad request: incomplete\n")
        else:  # a port check: connected and closed without a word
            self.answered = True
            self._close()
        return True  # our side stays open until the answer is out

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self._take(None)
        self.port._conns.discard(self)

    # -------------------------------------------------------------------------------------- internals
    def _take(self, slot: str | None) -> None:
        port = self.port
        if self.slot == "served":
            port.active -= 1
        elif self.slot == "closing":
            port.closing -= 1
        self.slot = slot
        if slot == "served":
            port.active += 1
            port.peak_active = max(port.peak_active, port.active)
        elif slot == "closing":
            port.closing += 1

    def _timed_out(self) -> None:
        self.port._pace()
        if self.answered:  # the client did not close (or take the answer) in time
            self.drop()
            return
        timeout = self.port.limits.request_timeout_s
        self.port._refuse(
            "timeout",
            self.peer,
            "no complete request within %g s (%d bytes), answered 408",
            timeout,
            len(self.head),
        )
        self._send(408, _TEXT, b"request timeout\n")

    def _request(self, head: bytes) -> None:
        lines = head.split(b"\n")
        line = _REQUEST_LINE.fullmatch(lines[0])
        bad = [h for h in lines[1:] if not _HEADER_LINE.fullmatch(h)]
        if line is None or bad:
            shown = lines[0] if line is None else bad[0]
            self.port._refuse(
                "malformed", self.peer, "a malformed request (%r), answered 400", bytes(shown[:80])
            )
            self._send(400, _TEXT, b"bad request\n")
            return
        if line.group(3) != b"1":
            version = f"{int(line.group(3))}.{int(line.group(4))}"
            self.port._refuse("malformed", self.peer, "a request in HTTP/%s, answered 400", version)
            self._send(400, _TEXT, b"bad request: HTTP/1.x only\n")
            return
        method, target = line.group(1).decode(), line.group(2).decode("latin-1")
        status, content_type, body = self.port._answer(method, target)
        extra = "Allow: GET, HEAD\r\n" if status == 405 else ""
        self._send(status, content_type, body, head_only=method == "HEAD", extra=extra)

    def _send(
        self, status: int, content_type: str, body: bytes, *, head_only: bool = False, extra: str = ""
    ) -> None:
        """The answer, then our side shut and the serving slot given up for a closing one; with no room
        there (a flood), closed at once."""
        self.answered = True
        assert self.transport is not None
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head if head_only else head + body)
        if self.port.closing < self.port.limits.max_closing and self.transport.can_write_eof():
            self._take("closing")
            try:
                self.transport.write_eof()
            except OSError:  # the client reset the connection already
                self.drop()
                return
            self._arm(min(1.0, self.port.limits.request_timeout_s))
        else:
            self._close()

    def _close(self) -> None:
        assert self.transport is not None
        self.transport.close()  # once the answer is out; dropped if that takes longer than the limit
        self._arm(min(1.0, self.port.limits.request_timeout_s))

    def _arm(self, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(seconds, self._timed_out)

    def drop(self) -> None:
        if self.transport is not None:
            self.transport.abort()
