"""`rl2edge status`: the live figures of a running serve, from its metrics endpoint, as one table.

Whatever answers at the URL is not trusted: the answers are read with their size and the whole command's
time bounded, and what is shown of them has its control characters escaped (a label holding ESC [ ...
would drive the terminal)."""

from __future__ import annotations

import argparse
import math
import threading
import time
from typing import Any
from urllib.parse import SplitResult, urlsplit

from rl2edge import bounded
from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError, printable, short_repr

DEFAULT_URL = "http://127.0.0.1:9464/metrics"
MAX_ANSWER_BYTES = 1 << 20
"""A serve's /metrics is a few KB: a larger answer is refused after this many bytes, unread past them."""
MAX_TIMEOUT_S = 3600.0
_CELL = 200
"""Characters of a value from the server shown in a table cell."""
_REQUIRED = (
    "rl2edge_cycles_total",
    "rl2edge_deadline_misses_total",
    "rl2edge_connected",
    "rl2edge_reconnects_total",
    "rl2edge_disconnected_seconds_total",
    "rl2edge_write_rejected_total",
    "rl2edge_deadline_seconds",
)
"""What every serve exports (process_* is Linux only; policy updates only with an updater)."""


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "status",
        help="the live figures of a running serve (needs serve --metrics-port)",
        formatter_class=fmt,
        description="Reads a running serve's /metrics, /healthz and /readyz and prints them as a table: "
        "for a field engineer with a terminal and no Grafana.",
        epilog=f"example:\n  rl2edge status --metrics-url {DEFAULT_URL}",
    )
    s.add_argument("--metrics-url", default=DEFAULT_URL, help=f"serve's metrics URL (default: {DEFAULT_URL})")
    s.add_argument(
        "--timeout",
        type=bounded.STATUS_TIMEOUT_S,
        default=3.0,
        help="seconds the whole command may take, all answers together (default: 3)",
    )
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.metrics import parse_metrics

    timeout = args.timeout
    if not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ConfigError(f"--timeout {timeout}: give a number of seconds above 0, at most {MAX_TIMEOUT_S:g}")
    url = args.metrics_url
    _check_url(url)
    deadline = time.monotonic() + timeout
    base = url[: -len("/metrics")] if url.endswith("/metrics") else url.rstrip("/")
    shown = printable(url, 120)
    text, _ = _get(base + "/metrics", deadline, timeout)
    try:
        m = parse_metrics(text)
    except Exception as exc:  # the parser's error on whatever the server sent, ValueError mostly
        why = printable(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, 120)
        raise ConfigError(
            f"{shown} did not answer with Prometheus metrics ({why}); is it serve's --metrics-port?"
        ) from None
    if ("rl2edge_connected", ()) not in m:
        raise ConfigError(f"{shown} answered with metrics, but not a serve's (no rl2edge_connected)")
    for name in _REQUIRED:
        values = [v for k, v in m.items() if k[0] == name]
        if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
            what = (
                "is missing" if not values else f"is {short_repr(values[0] if len(values) == 1 else values)}"
            )
            raise ConfigError(f"{shown} answered with serve's metrics, but {name} {what}: a damaged answer")
    health = {
        path: _get(base + path, deadline, timeout, ok_codes=(200, 503))[0].strip()
        for path in ("/healthz", "/readyz")
    }

    def value(name: str, **labels: str) -> float:
        v = m.get((name, tuple(sorted(labels.items()))), float("nan"))
        return float(v) if isinstance(v, (int, float)) else float("nan")

    statuses = sorted({str(dict(k[1]).get("status")) for k in m if k[0] == "rl2edge_cycles_total"})
    by_status = {s: value("rl2edge_cycles_total", status=s) for s in statuses}
    info = next((dict(k[1]) for k in m if k[0] == "rl2edge_artifact_info"), {})
    p50, p99 = (_quantile(m, "rl2edge_cycle_latency_seconds", q) for q in (0.5, 0.99))
    updates = {
        str(dict(k[1]).get("result", "?")): v for k, v in m.items() if k[0] == "rl2edge_policy_updates_total"
    }
    rss = value("process_resident_memory_bytes")
    rows = [
        ["health", health["/healthz"]],
        ["ready", health["/readyz"]],
        [
            "artifact",
            f"{info.get('path', '?')} ({info.get('mode', '?')}, {info.get('env_id', '?')}, sha256 {str(info.get('sha256', '?'))[:12]})",
        ],
        [
            "cycles",
            f"{_count(sum(by_status.values()))}: "
            + ", ".join(f"{k} {_count(v)}" for k, v in by_status.items()),
        ],
        [
            "latency",
            f"p50 <= {_ms(p50)} ms, p99 <= {_ms(p99)} ms (histogram bucket bounds), budget {_ms(value('rl2edge_deadline_seconds'))} ms",
        ],
        ["deadline misses", _count(value("rl2edge_deadline_misses_total"))],
        [
            "connection",
            f"{'up' if value('rl2edge_connected') == 1 else 'DOWN'}; reconnects {_count(value('rl2edge_reconnects_total'))}, disconnected {value('rl2edge_disconnected_seconds_total'):.1f} s",
        ],
        ["refused writes", _count(value("rl2edge_write_rejected_total"))],
        ["policy updates", ", ".join(f"{k} {_count(v)}" for k, v in sorted(updates.items())) or "-"],
        ["memory", f"RSS {rss / 2**20:.1f} MiB" if math.isfinite(rss) else "-"],
    ]
    print(table(["", _cell(base)], [[name, _cell(text)] for name, text in rows]))
    return 0


def _cell(text: object) -> str:
    """A table cell of what the server sent: control characters escaped, one line, cut."""
    return printable(str(text), _CELL).replace("\n", " ").replace("\t", " ")


def _count(v: Any) -> str:
    return str(int(v)) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def _check_url(url: str) -> SplitResult:
    example = f"e.g. {DEFAULT_URL}"
    shown = short_repr(url)
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ConfigError(f"--metrics-url {shown}: a URL has no spaces or control characters; {example}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number from 0 to 65535)
    except ValueError as exc:
        raise ConfigError(f"--metrics-url {shown} is not a valid URL ({exc}); {example}") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"--metrics-url {shown}: give an http:// URL, {example}")
    if not parts.hostname:
        raise ConfigError(f"--metrics-url {shown} names no host; {example}")
    return parts


class _TooLarge(Exception):
    pass


def _get(url: str, deadline: float, timeout: float, ok_codes: tuple[int, ...] = (200,)) -> tuple[str, int]:
    """GET `url`: (body, status), by `deadline` (time.monotonic) whatever the server does: the request
    runs in a thread that is abandoned, its socket shut, when the time is up (a server that sends a byte a
    second never trips a socket timeout, which is per read)."""
    import http.client
    import socket

    parts = urlsplit(url)
    shown = printable(url, 120)
    remaining = deadline - time.monotonic()
    late = ConfigError(
        f"no complete answer from {shown} within --timeout {timeout:g} s; is it serve's --metrics-port?"
    )
    if remaining <= 0:
        raise late
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=remaining)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    result: dict[str, Any] = {}

    def fetch() -> None:
        try:
            conn.request("GET", target, headers={"Accept": "text/plain", "Connection": "close"})
            r = conn.getresponse()
            if r.length is not None and r.length > MAX_ANSWER_BYTES:
                raise _TooLarge(f"Content-Length {r.length}")
            body = r.read(MAX_ANSWER_BYTES + 1)
            if len(body) > MAX_ANSWER_BYTES:
                raise _TooLarge(f"over {MAX_ANSWER_BYTES} bytes")
            result["answer"] = body, r.status
        except BaseException as exc:  # reported by the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=fetch, name="rl2edge-status-get", daemon=True)
    worker.start()
    worker.join(remaining)
    if worker.is_alive():
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        raise late
    conn.close()
    exc = result.get("error")
    if isinstance(exc, _TooLarge):
        raise ConfigError(
            f"{shown} answered with {exc} (a serve's metrics are a few KB); is it serve's --metrics-port?"
        )
    if isinstance(exc, http.client.HTTPException):
        why = printable(str(exc), 120) or type(exc).__name__
        if isinstance(exc, http.client.RemoteDisconnected):
            why = "it closed the connection without an answer"
        raise ConfigError(f"{shown} did not answer with valid HTTP ({why}); is it serve's --metrics-port?")
    if isinstance(exc, OSError):
        why = printable(str(exc.strerror or exc), 120) if not isinstance(exc, TimeoutError) else "timed out"
        raise ConfigError(
            f"no answer from {shown} ({why}); is serve running with --metrics-port, on this host and port?"
        )
    if exc is not None:
        why = printable(f"{type(exc).__name__}: {exc}", 120)
        raise ConfigError(f"{shown} could not be read ({why}); is it serve's --metrics-port?")
    body, status = result["answer"]
    if status not in ok_codes:
        raise ConfigError(f"{shown} answered HTTP {status}; is it serve's --metrics-port?")
    return body.decode("utf-8", "replace"), status


def _quantile(m: dict[Any, float], name: str, q: float) -> float:
    """The upper bound of the histogram bucket that holds quantile q (what a bucketed histogram can say)."""
    buckets = []
    for k, v in m.items():
        if k[0] == f"{name}_bucket":
            try:
                buckets.append((float(dict(k[1])["le"]), float(v)))
            except (KeyError, TypeError, ValueError):
                return float("nan")
    buckets.sort()
    if not buckets or not all(math.isfinite(c) for _, c in buckets) or buckets[-1][1] <= 0:
        return float("nan")
    rank = q * buckets[-1][1]
    return next((le for le, count in buckets if count >= rank), float("nan"))


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else ("> 2500" if math.isinf(seconds) else f"{seconds * 1e3:g}")
