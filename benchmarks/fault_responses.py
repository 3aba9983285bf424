"""What a fault response costs on a plant: an artifact's closed-loop return with faults injected at each rate,
answered `safe`, `hold` or `ramp` (plc_bridge.fault_response), next to the same episodes without faults.
The faults are drawn per step from one seeded generator, the responses applied on the plant's clock (one
step = --period-ms), as `rl2edge evaluate --inject-faults` and serve apply them.

    PYTHONPATH=. python benchmarks/fault_responses.py --artifact ART [--episodes 10] [--rates 0.01,0.05] \
        [--classes deadline_miss,invalid] [--period-ms 50] [--hold-ms 100] [--ramp-rate 1.0,2.0]

Writes benchmarks/results/fault_responses.{json,md,png} (--name to change).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.plc_bridge.fault_injection import FaultInjection, FaultInjector, InjectedFaults
from rl2edge.plc_bridge.fault_response import FaultResponder, FaultResponses
from rl2edge.plc_bridge.observation_guard import resolve_safe_action
from rl2edge.runtime import Policy
from rl2edge.train.core.evaluation import evaluate

_logger = logging.getLogger("benchmarks.fault_responses")


def run_cell(
    policy: Policy, env_id: str, episodes: int, fault: str | None, rate: float, response: str, args: Any
) -> dict[str, Any]:
    if fault is None:
        result = evaluate(policy.predict, env_id, episodes, args.seed)
        return {"fault": "none", "rate": 0.0, "response": "-", "returns": result.returns, "injected": 0,
                "held": 0, "ramped": 0}  # fmt: skip
    rate_limit = None if policy.discrete else tuple(args.ramp_rate)
    responses = FaultResponses({fault: response}, args.hold_ms, rate_limit)
    responder = FaultResponder(responses, resolve_safe_action(policy, None), policy.discrete)
    injector = FaultInjector(FaultInjection(((fault, rate),), args.fault_seed))
    act = InjectedFaults(policy.predict, responder, injector, args.period_ms / 1e3)
    result = evaluate(act, env_id, episodes, args.seed, on_reset=act.reset)
    counts = act.counts()
    return {"fault": fault, "rate": rate, "response": response, "returns": result.returns,
            "injected": counts["injected"], "held": counts["held"], "ramped": counts["ramped"]}  # fmt: skip


def table(rows: list[dict[str, Any]], episodes: int) -> str:
    head = ["fault", "rate", "response", f"mean return ({episodes} ep)", "std", "injected", "held", "ramped"]
    body = [
        [r["fault"], f"{r['rate']:.0%}" if r["rate"] else "-", r["response"], f"{np.mean(r['returns']):.2f}",
         f"{np.std(r['returns']):.2f}", str(r["injected"]), str(r["held"]), str(r["ramped"])]
        for r in rows
    ]  # fmt: skip
    return markdown_table(head, body)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    base = next(float(np.mean(r["returns"])) for r in rows if r["fault"] == "none")
    cells = [r for r in rows if r["fault"] != "none"]
    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r['fault']}\n{r['rate']:.0%} {r['response']}" for r in cells]
    ax.bar(range(len(cells)), [np.mean(r["returns"]) for r in cells], color="tab:blue")
    ax.axhline(base, color="k", linestyle="--", label=f"no faults ({base:.2f})")
    ax.set_xticks(range(len(cells)), labels, fontsize=7)
    ax.set_ylabel("mean return")
    ax.set_title("closed-loop return per fault response")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--artifact", required=True)
    p.add_argument("--env", help="default: the env the artifact was trained on")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument("--rates", default="0.01,0.05")
    p.add_argument("--classes", default="deadline_miss,invalid")
    p.add_argument("--period-ms", type=float, default=50.0)
    p.add_argument("--hold-ms", type=float, default=100.0)
    p.add_argument("--ramp-rate", type=lambda s: [float(v) for v in s.split(",")], default=[1.0, 2.0])
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="fault_responses")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    policy = Policy.load(args.artifact)
    env_id = args.env or policy.manifest.data["source"]["env_id"]
    # a Discrete action has no ramp: safe and hold only
    responses = ("safe", "hold") if policy.discrete else ("safe", "hold", "ramp")
    rows = [run_cell(policy, env_id, args.episodes, None, 0.0, "-", args)]
    for fault in args.classes.split(","):
        for rate in (float(r) for r in args.rates.split(",")):
            for response in responses:
                rows.append(run_cell(policy, env_id, args.episodes, fault, rate, response, args))
                _logger.info("%s %.0f%% %s: %.2f", fault, 100 * rate, response, np.mean(rows[-1]["returns"]))
    md = table(rows, args.episodes)
    md += (
        f"\n\n{env_id}, {args.artifact}: one step = {args.period_ms:g} ms; hold_ms {args.hold_ms:g}; ramp_rate "
        f"{args.ramp_rate} action units/s; episodes on seeds {args.seed}..{args.seed + args.episodes - 1}, "
        f"faults drawn from seed {args.fault_seed}."
    )
    data = {"env_id": env_id, "artifact": str(args.artifact), "period_ms": args.period_ms,
            "hold_ms": args.hold_ms, "ramp_rate": args.ramp_rate, "rows": rows}  # fmt: skip
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot(rows, out / f"{args.name}.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
