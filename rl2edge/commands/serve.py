"""`rl2edge serve`: the control loop between an artifact and a PLC over OPC UA."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from rl2edge.commands.common import (
    add_security_options,
    check_output_file,
    run_until_signal,
    security_config,
    table,
)

_logger = logging.getLogger("rl2edge")


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "serve",
        help="serve an artifact to a PLC over OPC UA",
        formatter_class=fmt,
        description="The control loop: every period one batched Read of the observation and the PLC's sequence number, "
        "validate, infer, one batched Write of the action, the answered sequence number, a heartbeat and a status. "
        "Invalid or stale input, deadline misses, inference errors get the safe action; lost connections are "
        "retried with backoff. SIGINT/SIGTERM write the safe action and exit 0.",
        epilog="example:\n  rl2edge serve artifacts/cp --endpoint opc.tcp://plc:4840 --map plant.yaml --period-ms 20 "
        "--summary serve.json",
    )
    s.add_argument("artifact", help="artifact directory")
    s.add_argument("--endpoint", required=True, help="the PLC's OPC UA endpoint, opc.tcp://host:port")
    s.add_argument("--map", help="node map YAML (default: the plc-sim layout)")
    s.add_argument("--period-ms", type=float, default=20.0, help="control period (default: 20)")
    s.add_argument(
        "--mode",
        default="cyclic",
        choices=["cyclic", "subscription"],
        help="cyclic (default): a cycle every period; subscription: a cycle on each new PLC sequence "
        "number, and at least one per period",
    )
    s.add_argument("--deadline-ms", type=float, default=50.0, help="latency budget per cycle (default: 50)")
    s.add_argument("--summary", help="write a JSON summary here on exit")
    s.add_argument(
        "--timeout-ms", type=float, default=1000.0, help="bound on every OPC UA request (default: 1000)"
    )
    s.add_argument("--stats-interval", type=float, default=10.0, help="seconds between latency log lines")
    s.add_argument("--cycles", type=int, help="stop after this many cycles (benchmarks)")
    s.add_argument(
        "--backend", default="auto", help="interpreter: auto, litert, tflite-runtime, tensorflow, onnxruntime"
    )
    s.add_argument("--threads", type=int, default=1, help="interpreter threads (default: 1)")
    s.add_argument(
        "--no-explore",
        action="store_true",
        help="artifacts with folded noise: feed zero noise (deterministic)",
    )
    s.add_argument("--noise-seed", type=int, help="artifacts with folded noise: override the manifest's seed")
    add_security_options(s, "client")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.fileio import write_json_atomic
    from rl2edge.plc_bridge.client import BridgeConfig
    from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
    from rl2edge.plc_bridge.nodemap import load_node_map
    from rl2edge.runtime.policy import Policy

    check_output_file(args.summary, "--summary")
    policy = Policy.load(
        args.artifact,
        backend=args.backend,
        num_threads=args.threads,
        explore=not args.no_explore,
        noise_seed=args.noise_seed,
    )
    if policy.noise is not None:
        _logger.info(
            "folded noise %s, %s (seed %s)",
            policy.noise["spec"],
            "on" if policy.explore else "off (--no-explore)",
            args.noise_seed if args.noise_seed is not None else policy.noise["seed"],
        )
    bridge = BridgeConfig(
        endpoint=args.endpoint,
        node_map=load_node_map(args.map),
        security=security_config(args, "client"),
        request_timeout_s=args.timeout_ms / 1e3,
    )
    cfg = LoopConfig(
        period_ms=args.period_ms,
        deadline_ms=args.deadline_ms,
        stats_interval_s=args.stats_interval,
        max_cycles=args.cycles,
        mode=args.mode,
    )
    control = ControlLoop(policy, bridge, cfg)
    _logger.info(
        "serving %s to %s, %s every %.1f ms (deadline %.1f ms)",
        args.artifact,
        args.endpoint,
        cfg.mode,
        cfg.period_ms,
        cfg.deadline_ms,
    )
    summary = run_until_signal(control.run)
    if args.summary:
        write_json_atomic(args.summary, summary)
    lat = summary["latency_ms"]
    print(
        table(
            [
                "cycles",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "budget ms",
                "misses",
                "invalid",
                "stale",
                "refused",
                "reconnects",
            ],
            [
                [
                    summary["cycles"],
                    *(_ms(lat[k]) for k in ("p50", "p99", "p99.9", "max")),
                    f"{cfg.deadline_ms:g}",
                    summary["deadline_misses"],
                    summary["invalid"],
                    summary["stale"],
                    summary["write_rejected"],
                    summary["reconnects"],
                ]
            ],
        )
    )
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
