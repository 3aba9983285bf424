"""`rl2edge status`: the live figures of a running serve, from its metrics endpoint, as one table."""

from __future__ import annotations

import argparse
import math
from typing import Any

from rl2edge.commands.common import table
from rl2edge.errors import ConfigError

DEFAULT_URL = "http://127.0.0.1:9464/metrics"


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
    s.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for an answer (default: 3)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.metrics import parse_metrics

    url = args.metrics_url
    base = url[: -len("/metrics")] if url.endswith("/metrics") else url.rstrip("/")
    text, _ = _get(base + "/metrics", args.timeout)
    try:
        m = parse_metrics(text)
    except ValueError as exc:
        raise ConfigError(
            f"{url} did not answer with Prometheus metrics ({exc}); is it serve's --metrics-port?"
        ) from None
    if ("rl2edge_connected", ()) not in m:
        raise ConfigError(f"{url} answered with metrics, but not a serve's (no rl2edge_connected)")
    health = {
        path: _get(base + path, args.timeout, ok_codes=(200, 503))[0].strip()
        for path in ("/healthz", "/readyz")
    }

    def value(name: str, **labels: str) -> float:
        return m.get((name, tuple(sorted(labels.items()))), float("nan"))

    statuses = sorted({dict(k[1]).get("status") for k in m if k[0] == "rl2edge_cycles_total"} - {None})
    by_status = {s: int(value("rl2edge_cycles_total", status=s)) for s in statuses}
    info = next((dict(k[1]) for k in m if k[0] == "rl2edge_artifact_info"), {})
    p50, p99 = (_quantile(m, "rl2edge_cycle_latency_seconds", q) for q in (0.5, 0.99))
    updates = {dict(k[1])["result"]: int(v) for k, v in m.items() if k[0] == "rl2edge_policy_updates_total"}
    rows = [
        ["health", health["/healthz"]],
        ["ready", health["/readyz"]],
        [
            "artifact",
            f"{info.get('path', '?')} ({info.get('mode', '?')}, {info.get('env_id', '?')}, sha256 {info.get('sha256', '?')[:12]})",
        ],
        ["cycles", f"{sum(by_status.values())}: " + ", ".join(f"{k} {v}" for k, v in by_status.items())],
        [
            "latency",
            f"p50 <= {_ms(p50)} ms, p99 <= {_ms(p99)} ms (histogram bucket bounds), budget {_ms(value('rl2edge_deadline_seconds'))} ms",
        ],
        ["deadline misses", f"{int(value('rl2edge_deadline_misses_total'))}"],
        [
            "connection",
            f"{'up' if value('rl2edge_connected') == 1 else 'DOWN'}; reconnects {int(value('rl2edge_reconnects_total'))}, disconnected {value('rl2edge_disconnected_seconds_total'):.1f} s",
        ],
        ["refused writes", f"{int(value('rl2edge_write_rejected_total'))}"],
        ["policy updates", ", ".join(f"{k} {v}" for k, v in sorted(updates.items())) or "-"],
        ["memory", f"RSS {value('process_resident_memory_bytes') / 2**20:.1f} MiB"],
    ]
    print(table(["", base], rows))
    return 0


def _get(url: str, timeout: float, ok_codes: tuple[int, ...] = (200,)) -> tuple[str, int]:
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--metrics-url {url}: give an http:// URL, e.g. {DEFAULT_URL}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode("utf-8", "replace"), r.status
    except urllib.error.HTTPError as exc:
        if exc.code in ok_codes:
            return exc.read().decode("utf-8", "replace"), exc.code
        raise ConfigError(f"{url} answered HTTP {exc.code}; is it serve's --metrics-port?") from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise ConfigError(
            f"no answer from {url} ({why}); is serve running with --metrics-port, on this host and port?"
        ) from None


def _quantile(m: dict[Any, float], name: str, q: float) -> float:
    """The upper bound of the histogram bucket that holds quantile q (what a bucketed histogram can say)."""
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in m.items() if k[0] == f"{name}_bucket")
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    rank = q * buckets[-1][1]
    return next(le for le, count in buckets if count >= rank)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else ("> 2500" if math.isinf(seconds) else f"{seconds * 1e3:g}")
