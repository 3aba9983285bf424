"""The corrupt-model corpus (issue 52): seeded corruptions of four int8 artifacts' policy.tflite (an MLP, a
Dict, a recurrent and a CNN policy), each judged several times as evaluate, serve and a hot update judge
it (testkit.model_fuzz): the verdicts, their stability, and the files the TFLite schema's own reader
cannot unpack, which must all be refused.

    PYTHONPATH=. python benchmarks/model_fuzz.py [--per-model 500] [--runs 3] [--seed 0] [--models DIR]

Writes benchmarks/results/model_fuzz.{json,md,png}. The four models are trained briefly and exported into
--models (kept there: a second run reuses them)."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from testkit.model_fuzz import FileResult, judge_corpus
from testkit.runs import AGV_RUN, export_run, tiny_train

_logger = logging.getLogger("benchmarks.model_fuzz")

MODELS: dict[str, dict[str, Any]] = {
    "mlp": dict(env_id="CartPole-v1", steps=2048),
    "dict": AGV_RUN,
    "recurrent": dict(
        env_id="PendulumNoVel-v1", steps=1024, algo="ppo_lstm", n_envs=2, n_steps=256, batch_size=256
    ),
    "cnn": dict(env_id="testkit.dict_envs:CameraCartPole", steps=512, n_envs=2, n_steps=128, batch_size=128),
}
OUTCOMES = ("accepted", "refused", "crashed", "traceback")


def build_models(root: Path) -> dict[str, tuple[Path, tuple[str, ...]]]:
    """name -> (policy.tflite of its int8 artifact, the Dict observation's keys)."""
    from rl2edge.runtime.manifest import load_manifest

    out = {}
    for name, run in MODELS.items():
        art = root / name / "int8"
        if not (art / "manifest.json").is_file():
            _logger.info("training and exporting the %s model", name)
            kwargs = {k: v for k, v in run.items() if k != "env_id"}
            export_run(tiny_train(run["env_id"], root / "runs" / name, **kwargs), art, "int8")
        manifest = load_manifest(art)
        out[name] = (art / "policy.tflite", tuple(k.name for k in manifest.observation.keys))
    return out


def summarize(results: list[FileResult], runs: int) -> list[dict[str, Any]]:
    rows = []
    for name in [*dict.fromkeys(r.model for r in results), "all"]:
        mine = [r for r in results if name in ("all", r.model)]
        outcomes = Counter(r.outcome for r in mine)
        broken = [r for r in mine if r.schema_refuses]
        rows.append(
            {
                "model": name,
                "files": len(mine),
                "runs_per_file": runs,
                **{k: outcomes.get(k, 0) for k in OUTCOMES},
                "refused_by_verifier": sum(r.by_verifier for r in mine),
                "stable": sum(r.stable for r in mine),
                "schema_reader_refuses": len(broken),
                "of_those_refused": sum(r.outcome == "refused" for r in broken),
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "files", "runs each", "refused", "by the verifier", "accepted", "crashed", "traceback",
            "verdict stable", "schema reader refuses", "of those refused"]  # fmt: skip
    body = [
        [r["model"], r["files"], r["runs_per_file"], f"{r['refused']} ({r['refused'] / r['files']:.1%})",
         r["refused_by_verifier"],
         r["accepted"], r["crashed"], r["traceback"], f"{r['stable'] / r['files']:.1%}",
         r["schema_reader_refuses"], r["of_those_refused"]]
        for r in rows
    ]  # fmt: skip
    return markdown_table(head, body)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [r["model"] for r in rows]
    bottom = [0.0] * len(rows)
    for outcome, color in zip(OUTCOMES, ("tab:green", "tab:blue", "tab:red", "black"), strict=True):
        share = [r[outcome] / r["files"] for r in rows]
        ax.bar(names, share, bottom=bottom, label=outcome, color=color)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_ylabel("share of corrupt files")
    ax.set_title("Corrupt policy.tflite files (sha256 recomputed): verdicts")
    ax.legend(loc="lower right")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-model", type=int, default=500)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--models", help="folder of the four int8 artifacts (built there if missing)")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="model_fuzz")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    models = build_models(Path(args.models or tempfile.mkdtemp(prefix="rl2edge-fuzz-models-")))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl2edge-fuzz-") as work:
        results = judge_corpus(models, args.per_model, args.runs, args.seed, Path(work))
    took = time.perf_counter() - t0
    rows = summarize(results, args.runs)
    md = table(rows) + (
        f"\n\n{len(results)} corrupt files (seed {args.seed}; kinds: bytes flipped anywhere, bytes flipped and "
        "4-byte words overwritten inside the flatbuffer's tables, truncations, runs of zeros), each judged "
        f"{args.runs} times in {took:.0f} s: the structure verifier (runtime/flatbuffer_verify.py), then a load "
        "and one run in a separate process, as evaluate, serve and a hot update do. 'schema reader refuses': "
        "files the TFLite schema's generated object API (ai_edge_litert.tools.flatbuffer_utils) cannot "
        "unpack. An accepted file is one whose corruption left a valid model (mostly changed weights)."
    )
    unstable = [{"model": r.model, "index": r.index, "kind": r.kind, "verdicts": r.verdicts}
                for r in results if not r.stable]  # fmt: skip
    kinds = Counter((r.kind, r.outcome) for r in results)
    data = {"per_model": args.per_model, "runs": args.runs, "seed": args.seed, "seconds": took, "rows": rows,
            "by_kind": [{"kind": k, "outcome": o, "files": n} for (k, o), n in sorted(kinds.items())],
            "unstable": unstable}  # fmt: skip
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot(rows, out / f"{args.name}.png")
    print(md)
    return data


if __name__ == "__main__":
    main()
