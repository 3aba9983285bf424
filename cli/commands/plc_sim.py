"""`rl2edge plc-sim`: a simulated PLC, an OPC UA server around a Gymnasium env."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rl2edge import bounded
from rl2edge.cli.commands.common import (
    add_security_options,
    check_output_file,
    run_until_signal,
    security_config,
    table,
)


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    ps = sub.add_parser(
        "plc-sim",
        help="a simulated PLC: an OPC UA server around a Gymnasium env",
        formatter_class=fmt,
        description="A real OPC UA server with the default node map's layout around a Gymnasium environment. "
        "lockstep: the env steps when the written action answers the current observation; realtime: every "
        "period with the last action held. Episode i uses seed S+i, as `rl2edge evaluate --seed S`.",
        epilog="example:\n  rl2edge plc-sim --env CartPole-v1 --endpoint opc.tcp://127.0.0.1:4840 --mode lockstep "
        "--episodes 5 --record returns.json",
    )
    ps.add_argument(
        "--env",
        required=True,
        help="Gymnasium id (CartPole-v1), package.module:Env-v0 (an id the module registers on import) or package.module:EnvClass",
    )
    ps.add_argument("--seed", type=bounded.SEED, default=0, help="seed of the first episode (default: 0)")
    ps.add_argument("--endpoint", default="opc.tcp://127.0.0.1:4840", help="where to listen")
    ps.add_argument("--mode", default="lockstep", choices=["lockstep", "realtime"])
    ps.add_argument(
        "--period-ms", type=bounded.PERIOD_MS, default=20.0, help="realtime mode: plant step period"
    )
    ps.add_argument("--episodes", type=bounded.EPISODES, help="stop after N episodes")
    ps.add_argument("--record", help='write {"returns": [...]} here when stopping')
    ps.add_argument(
        "--trace", help="write one JSON line per plant step here: seq, observation, applied action, status"
    )
    ps.add_argument(
        "--invalid-rate",
        type=bounded.SHARE,
        default=0.0,
        help="publish a NaN in this share of the observations (a failing sensor), seeded by --seed",
    )
    ps.add_argument(
        "--strict",
        action="store_true",
        help="refuse writes whose type or shape is not the node's (BadTypeMismatch), as real PLCs do",
    )
    add_security_options(ps, "server")
    ps.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.sim import PlcSim, SimConfig

    check_output_file(args.record, "--record")
    check_output_file(args.trace, "--trace")
    cfg = SimConfig(
        env_id=args.env,
        seed=args.seed,
        endpoint=args.endpoint,
        mode=args.mode,
        period_ms=args.period_ms,
        episodes=args.episodes,
        record=Path(args.record) if args.record else None,
        trace=Path(args.trace) if args.trace else None,
        security=security_config(args, "server"),
        strict=args.strict,
        invalid_rate=args.invalid_rate,
    )
    sim = PlcSim(cfg)
    returns = run_until_signal(sim.run)
    if returns:
        print(
            table(
                ["episodes", "mean return", "returns"],
                [[len(returns), f"{sum(returns) / len(returns):.1f}", " ".join(f"{r:.0f}" for r in returns)]],
            )
        )
    return 0
