"""`rl2edge serve`: the control loop between an artifact and a PLC over OPC UA, run as a plant service."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl2edge import bounded
from rl2edge.cli.commands.common import (
    OneLineErrors,
    add_security_options,
    check_output_file,
    run_until_signal,
    security_config,
    table,
)
from rl2edge.cli.commands.config_file import add_config_option
from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.drift_config import DEFAULT_THRESHOLD, DEFAULT_WINDOW, DriftConfig
from rl2edge.plc_bridge.fault_injection import parse_injection
from rl2edge.plc_bridge.realtime import (
    DEFAULT_PRIORITY,
    RealtimeConfig,
    apply_realtime,
    current_state,
)

if TYPE_CHECKING:
    from rl2edge.plc_bridge.nodemap import NodeMap
    from rl2edge.runtime.policy import Policy

_logger = logging.getLogger("rl2edge")

PATH_OPTIONS = ("artifact", "map", "summary", "record", "cert", "key", "server_cert", "password_file")


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    s = sub.add_parser(
        "serve",
        help="serve an artifact to a PLC over OPC UA",
        formatter_class=fmt,
        description="The control loop: every period one batched Read of the observation and the PLC's sequence number, "
        "validate, infer, one batched Write of the action, the answered sequence number, a heartbeat and a status. "
        "Invalid or stale input, deadline misses, inference errors get the safe action; lost connections are "
        "retried with backoff. SIGINT/SIGTERM write the safe action and exit 0. SIGHUP (or --watch) loads the "
        "artifact path anew and, once verified and shadow-run, swaps it in between two cycles.",
        epilog="examples:\n  rl2edge serve artifacts/cp --endpoint opc.tcp://plc:4840 --map plant.yaml --period-ms 20 "
        "--summary serve.json\n  rl2edge serve --config /etc/rl2edge/serve.yaml",
    )
    s.add_argument("artifact", nargs="?", help="artifact directory (a symlink such as current/ for --watch)")
    s.add_argument("--endpoint", help="the PLC's OPC UA endpoint, opc.tcp://host:port (required)")
    s.add_argument("--map", help="node map YAML (default: the plc-sim layout)")
    s.add_argument("--period-ms", type=bounded.PERIOD_MS, default=20.0, help="control period (default: 20)")
    s.add_argument(
        "--mode",
        default="cyclic",
        choices=["cyclic", "subscription"],
        help="cyclic (default): a cycle every period; subscription: a cycle on each new PLC sequence "
        "number, and at least one per period",
    )
    s.add_argument(
        "--deadline-ms", type=bounded.DEADLINE_MS, default=50.0, help="latency budget per cycle (default: 50)"
    )
    s.add_argument(
        "--spin-ms",
        type=bounded.SPIN_MS,
        default=None,
        help="cyclic mode: wake from the event loop this long before each slot, warm the decision up, then "
        "sleep in the kernel and spin the last 0.15 ms, for a punctual start (0: the event loop's timer "
        "alone, 0.1-1 ms late; default: 2, or half of a period shorter than 4 ms)",
    )
    s.add_argument("--summary", help="JSON summary, rewritten at every stats interval and on exit")
    s.add_argument(
        "--timeout-ms",
        type=bounded.TIMEOUT_MS,
        default=1000.0,
        help="bound on every OPC UA request (default: 1000)",
    )
    s.add_argument(
        "--stats-interval",
        type=bounded.STATS_INTERVAL_S,
        default=10.0,
        help="seconds between stats lines and summary rewrites",
    )
    s.add_argument("--cycles", type=bounded.CYCLES, help="stop after this many cycles (benchmarks)")
    s.add_argument(
        "--backend", default="auto", help="interpreter: auto, litert, tflite-runtime, tensorflow, onnxruntime"
    )
    s.add_argument("--threads", type=bounded.THREADS, default=1, help="interpreter threads (default: 1)")
    s.add_argument(
        "--no-explore",
        action="store_true",
        help="artifacts with folded noise: feed zero noise (deterministic)",
    )
    s.add_argument(
        "--noise-seed",
        type=bounded.NOISE_SEED,
        help="artifacts with folded noise: override the manifest's seed",
    )
    s.add_argument(
        "--allow-state-across-episodes",
        action="store_true",
        help="stateful artifacts (memory, frame stack, rate limit, OU noise) on a plant without episodes: "
        "serve with no episode_start node, the state never reset at an episode start (the map's "
        "state_across_episodes: true); without it such a map is refused",
    )

    r = s.add_argument_group("real time (docs/serving.md, 'A loop a busy CPU cannot make late')")
    r.add_argument(
        "--realtime",
        nargs="?",
        type=bounded.RT_PRIORITY,
        const=DEFAULT_PRIORITY,
        metavar="PRIORITY",
        help=f"SCHED_FIFO at PRIORITY (default {DEFAULT_PRIORITY}), memory locked, the garbage collector frozen "
        "after start-up and run after each write; needs CAP_SYS_NICE or an rtprio limit, and a memlock limit",
    )
    r.add_argument(
        "--cpu-affinity", type=bounded.cpu_list, metavar="CPUS", help="run on these CPUs only: 3, 2,3 or 2-3"
    )
    r.add_argument(
        "--inject-faults",
        metavar="CLASS:RATE,...",
        help="commissioning only: inject faults per cycle (e.g. deadline_miss:0.05), answered as the map says",
    )
    r.add_argument("--fault-seed", type=bounded.SEED, default=0, help="seed of --inject-faults (default: 0)")

    u = s.add_argument_group("policy updates (SIGHUP, --watch)")
    u.add_argument(
        "--watch",
        action="store_true",
        help="poll the artifact path (e.g. a symlink the deployer swaps atomically) and update when it changes",
    )
    u.add_argument(
        "--watch-interval",
        type=bounded.WATCH_INTERVAL_S,
        default=1.0,
        help="seconds between polls (default: 1)",
    )
    u.add_argument(
        "--shadow-cycles",
        type=bounded.SHADOW_CYCLES,
        default=50,
        help="OK cycles a new policy runs beside the serving one, its actions compared, not written (default: 50)",
    )
    u.add_argument(
        "--shadow-min-agreement",
        type=bounded.SHARE,
        default=0.9,
        help="discrete actions: least share of equal actions to take over (default: 0.9)",
    )
    u.add_argument(
        "--shadow-max-diff",
        type=bounded.SHARE,
        default=0.1,
        help="Box actions: largest mean action difference, as a share of the range, to take over (default: 0.1)",
    )

    rec = s.add_argument_group("flight recorder and drift (docs/serving.md, 'What the policy saw and did')")
    rec.add_argument(
        "--record",
        metavar="DIR",
        help="record every cycle (observation, action, status, latency, serving policy) into rotating "
        "JSON Lines segments in DIR, off the control loop; read them with `rl2edge trace` and `rl2edge replay`",
    )
    rec.add_argument(
        "--record-max-mb",
        type=bounded.RECORD_MB,
        default=512.0,
        help="the trace folder's size bound: the oldest segments are removed past it (default: 512)",
    )

    rec.add_argument(
        "--drift-threshold",
        type=bounded.DRIFT_THRESHOLD,
        default=DEFAULT_THRESHOLD,
        help="observation drift: warn (log, metrics, summary, /readyz's reason) when a window's mean is this many "
        f"standard deviations from the calibration data's mean in some dimension (default: {DEFAULT_THRESHOLD:g})",
    )
    rec.add_argument(
        "--drift-window",
        type=bounded.DRIFT_WINDOW,
        default=DEFAULT_WINDOW,
        help=f"observations per drift window (default: {DEFAULT_WINDOW})",
    )

    m = s.add_argument_group("metrics and health")
    m.add_argument(
        "--metrics-port",
        type=bounded.PORT,
        help="serve /metrics, /healthz and /readyz on this port (default: off)",
    )
    m.add_argument("--metrics-host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    m.add_argument(
        "--health-periods",
        type=bounded.HEALTH_PERIODS,
        default=10,
        help="/readyz: the last cycle completed within this many periods (default: 10)",
    )
    add_security_options(s, "client")
    add_config_option(s, "/etc/rl2edge/serve.yaml", PATH_OPTIONS)
    s.set_defaults(func=run)


def read_config_file(path: Path) -> argparse.Namespace:
    """serve's options as `rl2edge serve --config PATH` reads them: the same parser, the same file rules
    (the Mender update module finds serve's artifact path and metrics port this way). A file serve would
    refuse raises ConfigError or, for a value argparse refuses, SystemExit after argparse's one line."""
    from rl2edge.cli.commands.config_file import apply_config_file

    top = OneLineErrors(prog="rl2edge")
    add_parser(top.add_subparsers(dest="command", required=True), argparse.HelpFormatter)
    argv = ["serve", "--config", str(path)]
    return apply_config_file(top, argv, top.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.client import BridgeConfig
    from rl2edge.plc_bridge.loop import LoopConfig
    from rl2edge.plc_bridge.metrics import HealthConfig
    from rl2edge.plc_bridge.nodemap import load_node_map
    from rl2edge.plc_bridge.policy_update import UpdateConfig
    from rl2edge.plc_bridge.recorder import RecordConfig
    from rl2edge.plc_bridge.service import ServeService, ServiceConfig
    from rl2edge.runtime.policy import Policy

    if not args.artifact:
        raise ConfigError("serve needs an artifact: give its folder, or artifact: in the --config file")
    if not args.endpoint:
        raise ConfigError("serve needs --endpoint opc.tcp://host:port (or endpoint: in the --config file)")
    check_output_file(args.summary, "--summary")
    record = RecordConfig(Path(args.record), max_mb=args.record_max_mb) if args.record else None
    if record is not None:
        record.check()
    drift = DriftConfig(window=args.drift_window, threshold=args.drift_threshold)
    drift.check()
    node_map = load_node_map(args.map)  # before the artifact: a mistake in it shows at once
    if args.allow_state_across_episodes:
        node_map = _state_across_episodes(node_map, args.map)
    # before the model process and serve's threads start: they inherit the scheduler
    realtime = RealtimeConfig(priority=args.realtime, cpus=args.cpu_affinity)
    rt_state = apply_realtime(realtime) if realtime.requested else current_state()

    # The model runs in its own process: a crash or a hang costs that process (INFERENCE_ERROR, the safe
    # action, a restart), never serve. A call that takes twice the deadline is a hang: the child is killed.
    call_timeout_s = min(max(2 * args.deadline_ms / 1e3, 0.05), 5.0)

    def load(path: str | Path) -> Policy:
        return Policy.load(
            path,
            backend=args.backend,
            num_threads=args.threads,
            explore=not args.no_explore,
            noise_seed=args.noise_seed,
            isolate=True,
            call_timeout_s=call_timeout_s,
        )

    # what the path points to now, once: a deployer's swap during start-up is an update, not a mix-up
    policy = load(os.path.realpath(args.artifact))
    if policy.noise is not None:
        _logger.info(
            "folded noise %s, %s (seed %s)",
            policy.noise["spec"],
            "on" if policy.explore else "off (--no-explore)",
            args.noise_seed if args.noise_seed is not None else policy.noise["seed"],
        )
    _say_rate_limit(policy, args.period_ms)
    bridge = BridgeConfig(
        endpoint=args.endpoint,
        node_map=node_map,
        security=security_config(args, "client"),
        request_timeout_s=args.timeout_ms / 1e3,
    )
    cfg = LoopConfig(
        period_ms=args.period_ms,
        deadline_ms=args.deadline_ms,
        stats_interval_s=args.stats_interval,
        max_cycles=args.cycles,
        mode=args.mode,
        spin_ms=args.spin_ms,
        gc_after_write=args.realtime is not None,
        inject_faults=parse_injection(args.inject_faults, args.fault_seed) if args.inject_faults else None,
        realtime=rt_state.to_json(),
    )
    if cfg.inject_faults is not None:
        _logger.warning(
            "COMMISSIONING: injecting faults (%s, seed %d); never in production",
            args.inject_faults,
            args.fault_seed,
        )
    service = ServeService(
        policy,
        bridge,
        cfg,
        ServiceConfig(
            updates=UpdateConfig(
                artifact=Path(args.artifact),
                load=load,
                watch=args.watch,
                poll_s=args.watch_interval,
                shadow_cycles=args.shadow_cycles,
                min_agreement=args.shadow_min_agreement,
                max_action_diff=args.shadow_max_diff,
            ),
            health=HealthConfig(
                periods=args.health_periods,
                stall_s=bridge.connect_timeout_s + cfg.backoff_max_s + 1.0,
            ),
            metrics_host=args.metrics_host,
            metrics_port=args.metrics_port,
            summary=Path(args.summary) if args.summary else None,
            record=record,
            drift=drift,
        ),
    )
    _logger.info(
        "serving %s to %s, %s every %.1f ms (deadline %.1f ms)",
        args.artifact,
        args.endpoint,
        cfg.mode,
        cfg.period_ms,
        cfg.deadline_ms,
    )
    try:
        summary = run_until_signal(service.run)
    finally:
        service.close()
    if args.summary:
        from rl2edge.fileio import write_json_atomic

        write_json_atomic(args.summary, summary)
    print(summary_table(summary))
    return 0


def _state_across_episodes(node_map: NodeMap, map_path: str | None) -> NodeMap:
    """--allow-state-across-episodes: the default map reads no EpisodeStart; a map naming one contradicts it."""
    from dataclasses import replace

    if node_map.episode_start is not None and map_path is not None:
        raise ConfigError(
            f"--allow-state-across-episodes and {map_path}'s episode_start node contradict each other: drop "
            "the option (the state resets at each episode start) or the node (it never does)"
        )
    return replace(node_map, episode_start=None, state_across_episodes=True)


def summary_table(summary: dict[str, Any]) -> str:
    lat = summary["latency_ms"]
    updates = (summary.get("policy") or {}).get("updates") or {}
    return table(
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
            "updates ok/refused",
        ],
        [
            [
                summary["cycles"],
                *(_ms(lat[k]) for k in ("p50", "p99", "p99.9", "max")),
                f"{summary['deadline_ms']:g}",
                summary["deadline_misses"],
                summary["invalid"],
                summary["stale"],
                summary["write_rejected"],
                summary["reconnects"],
                f"{updates.get('accepted', 0)}/{updates.get('refused', 0)}",
            ]
        ],
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _say_rate_limit(policy: Policy, period_ms: float) -> None:
    """An artifact with a folded action-rate limit moves at most max_step per plant step (export.rate_limit):
    max_rate only holds where the plant steps at the period export stated it at."""
    rate = policy.manifest.data["folded"].get("action_rate")
    if not rate:
        return
    _logger.info(
        "action-rate limit: at most %s per plant step (%s units/s at %g ms)",
        rate["max_step"],
        rate["max_rate"],
        rate["period_ms"],
    )
    if abs(float(rate["period_ms"]) - period_ms) > 1e-6 * period_ms:
        _logger.warning(
            "the artifact's action-rate limit is stated at a period of %g ms, serve's --period-ms is %g: the "
            "limit applies per plant step, so it is %s units/s only where the plant steps every %g ms",
            rate["period_ms"],
            period_ms,
            rate["max_rate"],
            rate["period_ms"],
        )
