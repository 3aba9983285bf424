"""A hyperparameter sweep as a benchmark: `rl2edge tune`'s work (Ray Tune, Optuna, ASHA) on this machine,
with the best trial's return, the wall time and what ASHA saved against running every trial to the end.

    python benchmarks/sweep.py                      # SAC on Pendulum-v1, 16 trials x 20k steps
    python benchmarks/sweep.py --algo ppo --env CartPole-v1 --space benchmarks/sweeps/ppo_cartpole.yml \\
        --trials 8 --name sweep_ppo_cartpole

Writes benchmarks/results/<name>.{json,md,png}; the sweep's own folder (every trial's run directory) goes to
--workdir (default: a temporary folder, removed afterwards).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, write_results  # noqa: E402


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="sac")
    ap.add_argument("--framework", default="torch")
    ap.add_argument("--env", default="Pendulum-v1")
    ap.add_argument("--space", default=str(ROOT / "benchmarks/sweeps/sac_pendulum.yml"))
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--num-cpus", type=int, help="CPUs Ray may use (default: all)")
    ap.add_argument("--name", default="sweep_sac_pendulum")
    ap.add_argument("--workdir", help="keep the sweep (run directories) here")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)

    from rl2edge.train.distributed.cluster import ray_session
    from rl2edge.train.distributed.search_space import load_search_space
    from rl2edge.train.distributed.sweep import SweepSpec, TrialRow, run_sweep
    from rl2edge.train.distributed.sweep_report import markdown, plot_png

    space = load_search_space(args.space, args.algo, args.env)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    spec = SweepSpec(args.algo, args.framework, args.env, space, seeds=seeds, trials=args.trials)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="rl2edge-sweep-"))
    try:
        with ray_session(num_cpus=args.num_cpus) as ray:
            cpus = ray.cluster_resources().get("CPU", 0)
            report = run_sweep(spec, work / "sweep", progress=True)
        rows = [TrialRow(**r) for r in report["trials_table"]]
        md = markdown(report, rows).replace(str(work), "<workdir>")
        head = (
            f"Ray {cpus:.0f} CPUs, search space `{Path(args.space).relative_to(ROOT) if Path(args.space).is_relative_to(ROOT) else args.space}`"
            f", Optuna TPE (seed {spec.search_seed}), ASHA (grace one evaluation period, reduction factor "
            f"{spec.reduction_factor}).\n\n"
        )
        out = Path(args.out)
        write_results(args.name, {"report": report}, head + md, out)
        (out / f"{args.name}.png").write_bytes(plot_png(report, rows))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    best = report["best"]
    print(
        f"best {best['final_eval']:.1f} ({best['hyperparameters']}), wall {report['wall_time_s']:.0f} s, "
        f"ASHA saved {100 * report['asha_saved_fraction']:.0f}% of env steps"
    )
    return report


if __name__ == "__main__":
    main()
