"""`rl2edge replay`: a candidate artifact run on a flight recorder's trace, before it rolls out
(plc_bridge.replay). Exit 0 when it passes the gate, 1 when it does not, 2 on bad input."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rl2edge import bounded
from rl2edge.cli.commands.common import table


def add_parser(sub: Any, fmt: type[argparse.HelpFormatter]) -> None:
    r = sub.add_parser(
        "replay",
        help="run a candidate artifact on a recorded trace and gate a roll-out on its agreement",
        formatter_class=fmt,
        description="Feeds the observations serve recorded (serve --record) to a candidate artifact, in order, "
        "its state reset where serve reset the serving policy's, and compares its actions with those served "
        "(OK cycles). Discrete actions: the share that agree; Box actions: max and mean |difference| per "
        "dimension. Exit 1 when the agreement is under --min-agreement (Discrete) or the mean difference over "
        "--max-diff of the action's range (Box): a roll-out script stops there.",
        epilog="examples:\n  rl2edge replay artifacts/cp-v2 --trace /var/lib/rl2edge/trace --min-agreement 0.95\n"
        "  rl2edge replay artifacts/pd-v2 --trace trace/ --max-diff 0.05 --json",
    )
    r.add_argument("candidate", help="the artifact to judge (a folder with manifest.json)")
    r.add_argument("--trace", required=True, help="the folder serve --record wrote")
    r.add_argument(
        "--min-agreement",
        type=bounded.SHARE,
        default=0.9,
        help="Discrete and MultiDiscrete actions: the least share of equal actions that passes (default: 0.9)",
    )
    r.add_argument(
        "--max-diff",
        type=bounded.SHARE,
        default=0.1,
        help="Box actions: the largest mean over cycles of each cycle's largest |difference| as a share of its "
        "dimension's range (the shadow run's measure) that passes (default: 0.1)",
    )
    r.add_argument(
        "--backend", default="auto", help="auto, litert, tflite-runtime, tensorflow or onnxruntime"
    )
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rl2edge.plc_bridge.replay import ReplayGate, replay
    from rl2edge.runtime.policy import Policy
    from rl2edge.runtime.trace import read_trace

    trace = read_trace(args.trace)
    candidate = Policy.load(args.candidate, backend=args.backend, explore=False)
    try:
        result = replay(candidate, trace, ReplayGate(args.min_agreement, args.max_diff))
    finally:
        candidate.close()
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result))
    return 0 if result["passed"] else 1


def _table(r: dict[str, Any]) -> str:
    rows: list[list[object]] = [["overall", r["compared"], _figure(r)]]
    rows += [[f"policy {p}", f["cycles"], _figure(f)] for p, f in r["per_policy"].items()]
    drift = r["drift"]
    lines = [
        table(
            [
                "served by",
                "OK cycles compared",
                "agreement" if r["kind"] == "categorical" else "|difference|",
            ],
            rows,
        ),
        "",
        f"replayed {r['calls_replayed']} calls ({r['resets']} state resets where serve reset); "
        f"drift on the trace: {'-' if drift.get('score') is None else format(drift['score'], '.2f')}",
    ]
    for w in r["worst"][:3]:
        lines.append(f"  cycle {w['cycle']}: served {w['served']}, candidate {w['candidate']}")
    lines.append(f"{'PASSED' if r['passed'] else 'FAILED'}: {r['gate']}")
    return "\n".join(lines)


def _figure(f: dict[str, Any]) -> str:
    if "agreement" in f:
        return f"{100 * f['agreement']:.2f} %"
    return (
        f"max {max(f['max_abs_diff']):.4g}, mean {sum(f['mean_abs_diff']) / len(f['mean_abs_diff']):.4g} "
        f"({100 * f['mean_diff_share_of_range']:.2f} % of the range)"
    )
