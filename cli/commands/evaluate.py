"""`rl2edge evaluate`: run an artifact through the runtime in its environment."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rl2edge import bounded
from rl2edge.cli.commands.common import table
from rl2edge.errors import ConfigError


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    v = sub.add_parser(
        "evaluate",
        help="run an artifact in its environment",
        formatter_class=fmt,
        description="Run an artifact through the runtime (the code that serves it on the device) for N episodes "
        "with seeds S, S+1, ... and report the returns.",
        epilog="examples:\n  rl2edge evaluate artifacts/cp --episodes 20 --seed 0 --json   # in the env it was trained on\n"
        "  rl2edge evaluate artifacts/cp --env CartPole-v1   # or another registered id / package.module:EnvClass",
    )
    v.add_argument("artifact", help="artifact directory (manifest.json + policy.tflite)")
    v.add_argument(
        "--env",
        help="Gymnasium id, package.module:Env-v0 or package.module:EnvClass (default: the env the artifact was trained on, from its "
        "manifest)",
    )
    v.add_argument("--episodes", type=bounded.EPISODES, default=20, help="episodes (default: 20)")
    v.add_argument("--seed", type=bounded.SEED, default=0, help="seed of the first episode (default: 0)")
    v.add_argument(
        "--explore",
        action="store_true",
        help="artifacts with folded noise: sample it (default: deterministic)",
    )
    v.add_argument(
        "--noise-seed",
        type=bounded.NOISE_SEED,
        help="artifacts with folded noise: override the manifest's seed",
    )
    v.add_argument(
        "--backend", default="auto", help="auto, litert, tflite-runtime, tensorflow or onnxruntime"
    )
    v.add_argument(
        "--json", action="store_true", help="print one JSON object (mean_return, std_return, returns, ...)"
    )
    f = v.add_argument_group("fault injection (docs/serving.md, 'Fault responses')")
    f.add_argument(
        "--inject-faults",
        metavar="CLASS:RATE,...",
        help="inject faults per step, e.g. deadline_miss:0.05,invalid:0.01, answered as the node map says",
    )
    f.add_argument("--map", help="node map whose fault_response, hold_ms, ramp_rate and safe_action apply")
    f.add_argument(
        "--period-ms",
        type=bounded.PERIOD_MS,
        default=20.0,
        help="the plant's step, the clock of hold_ms and ramp_rate (20)",
    )
    f.add_argument(
        "--fault-seed", type=bounded.SEED, default=0, help="seed of the injected faults (default: 0)"
    )
    v.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.runtime.policy import Policy
    from rl2edge.train.core.env_fit import ARTIFACT_FIX, check_fits_env
    from rl2edge.train.core.envs import check_env_id
    from rl2edge.train.core.evaluation import evaluate

    if args.env is not None:
        check_env_id(args.env)
    policy = Policy.load(
        args.artifact, backend=args.backend, explore=args.explore, noise_seed=args.noise_seed
    )
    if args.env is None:
        args.env = _trained_env(policy.manifest.data, args.artifact)
        check_env_id(args.env)
    check_fits_env(policy.observation_spec, policy.action_spec, args.env, ARTIFACT_FIX)
    # each episode starts the policy's state afresh (a recurrent artifact's; nothing for a stateless one)
    act, on_reset, faults = policy.predict, policy.reset, None
    if args.inject_faults:
        faults = _injected(policy, args)
        act, on_reset = faults, _in_turn(faults.reset, policy.reset)
    elif args.map:
        raise ConfigError("--map applies with --inject-faults (the fault responses it chooses)")
    result = evaluate(act, args.env, args.episodes, args.seed, on_reset=on_reset)
    out = {
        "artifact": str(args.artifact),
        "env_id": args.env,
        "backend": policy.backend_name,
        "quantization": policy.manifest.quantization["mode"],
        "episodes": args.episodes,
        "seed": args.seed,
        "mean_return": result.mean,
        "std_return": result.std,
        "returns": result.returns,
        "lengths": result.lengths,
    }
    if faults is not None:
        out["faults"] = {
            "injected": args.inject_faults,
            "responses": faults.responder.responses,
            "period_ms": args.period_ms,
            **faults.counts(),
        }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            table(
                ["artifact", "quantization", "backend", "episodes", "mean return"],
                [
                    [
                        args.artifact,
                        out["quantization"],
                        out["backend"],
                        args.episodes,
                        f"{result.mean:.1f} +- {result.std:.1f}",
                    ]
                ],
            )
        )
        if faults is not None:  # what was injected and how the fault responses answered it
            print(table([f"--inject-faults {args.inject_faults}", "count"], list(faults.counts().items())))
    return 0


def _in_turn(*fns: Any) -> Any:
    """One callable that calls each of `fns` in turn (episode-start resets)."""

    def call() -> None:
        for fn in fns:
            fn()

    return call


def _injected(policy: Any, args: argparse.Namespace) -> Any:
    """policy.predict with the faults of --inject-faults, answered as --map's fault responses say."""
    from rl2edge.plc_bridge.fault_injection import FaultInjector, InjectedFaults, parse_injection
    from rl2edge.plc_bridge.fault_response import FaultResponder
    from rl2edge.plc_bridge.nodemap import default_node_map, load_node_map
    from rl2edge.plc_bridge.observation_guard import action_span, resolve_safe_action

    if not 1 <= args.period_ms <= 60_000:
        raise ConfigError(f"--period-ms {args.period_ms:g}: choose a period from 1 to 60000 ms")
    node_map = load_node_map(args.map) if args.map else default_node_map()
    safe = resolve_safe_action(policy, node_map.safe_action)
    responder = FaultResponder(node_map.fault_responses, safe, policy.categorical, action_span(policy))
    injector = FaultInjector(parse_injection(args.inject_faults, args.fault_seed))
    return InjectedFaults(policy.predict, responder, injector, args.period_ms / 1e3)


def _trained_env(manifest: dict[str, Any], artifact: str) -> str:
    """The env id the manifest's source was trained on (every export records it)."""
    source = manifest.get("source")
    env_id = source.get("env_id") if isinstance(source, dict) else None
    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"{artifact}: the manifest names no env it was trained on; give --env")
    return env_id
