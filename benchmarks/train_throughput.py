"""Training throughput: env steps per second of rl2edge (torch and TF) next to Stable-Baselines3, on the
same preset, on the same machine, in one run (interleaved, so drift hits all alike), with the
deterministic return each reaches.

    python benchmarks/train_throughput.py [--algo ppo] [--env CartPole-v1] [--steps 100000] [--repeats 1]
    python benchmarks/train_throughput.py --algo a2c --steps 500000
    python benchmarks/train_throughput.py --algo rainbow --steps 50000
    python benchmarks/train_throughput.py --algo ppo_lstm --env CartPoleNoVel-v1 --repeats 2

--algo ppo and a2c: rl2edge's preset in both backends next to SB3's PPO / A2C given the same
hyperparameters. --algo rainbow: SB3's DQN on rl2edge's DQN preset, next to Rainbow with every component
switched off on that same preset (DQN's work per step, Rainbow's code path), and Rainbow with every
component on, on its own preset (train_freq 1: 256x the gradient steps per env step of DQN's preset).
--algo ppo_lstm: rl2edge's recurrent PPO next to sb3-contrib's RecurrentPPO (MlpLstmPolicy) given the same
hyperparameters and network, with VecNormalize on the observations as rl2edge normalizes them (the
return: evaluate with RecurrentPPO's predict(obs, state, episode_start), the state carried).

Writes benchmarks/results/train_throughput[_<algo>][_t<N>].{json,md,png}. One thread per op for every
contender by default (--threads N for more), as in benchmarks/reference.md (SB3 2.9.2, Zoo CartPole PPO preset: 4201 env steps/s, 23.8 s, 500 +- 0).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results  # noqa: E402

REFERENCE = {"CartPole-v1": {"sb3_steps_per_s": 4201, "sb3_return": "500 +- 0"}}

# Each contender runs in its own fresh process, so no framework's threads or allocators affect another's.
_RUNNER = r"""
import json, os, sys, time, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
who, algo, env_id, steps, seed, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6])
overrides, threads = json.loads(sys.argv[7]), int(sys.argv[8])
import torch
torch.set_num_threads(threads)
from rl2edge.train.algos import build_config, get, train
from rl2edge.train.core.config import load_preset
from rl2edge.train.core.evaluation import evaluate
if who == "sb3":
    import numpy as np
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    import rl2edge.train.core.envs  # registers the NoVel ids
    p = load_preset(get(algo).preset_file(), env_id)
    lin = lambda v: (lambda f: f * float(str(v)[4:])) if str(v).startswith("lin_") else v
    p.update(overrides)
    if p.get("rnn_type", "lstm") != "lstm":
        raise SystemExit("--who sb3 with rnn_type gru: sb3-contrib's RecurrentPPO has LSTMs only")
    lstm_keys = ("lstm_hidden_size", "n_lstm_layers", "shared_lstm", "enable_critic_lstm")
    skip = ("n_envs", "n_timesteps", "normalize_obs", "policy", "net_arch", "noise_type", "noise_std", "activation", "rnn_type", *lstm_keys)
    kw = {k: lin(v) for k, v in p.items() if k not in skip}
    if "net_arch" in p:
        kw["policy_kwargs"] = {"net_arch": p["net_arch"]}
    if algo == "ppo_lstm":
        kw.setdefault("policy_kwargs", {}).update({k: p[k] for k in lstm_keys if k in p})
        kw["policy_kwargs"]["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[p.get("activation", "tanh")]
    venv = make_vec_env(env_id, n_envs=p.get("n_envs", 1), seed=seed)
    if algo == "ppo_lstm":
        from stable_baselines3.common.vec_env import VecNormalize
        venv = VecNormalize(venv, norm_reward=False)
    if p.get("noise_type") == "normal":  # TD3/DDPG presets: Gaussian action noise, as SB3 takes it
        from stable_baselines3.common.noise import NormalActionNoise
        n = venv.action_space.shape[0]
        kw["action_noise"] = NormalActionNoise(np.zeros(n), float(p["noise_std"]) * np.ones(n))
    cls = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN, "sac": sb3.SAC, "td3": sb3.TD3}.get(algo)
    if algo == "ppo_lstm":
        from sb3_contrib import RecurrentPPO as cls
    model = cls("MlpLstmPolicy" if algo == "ppo_lstm" else "MlpPolicy", venv, seed=seed, device="cpu", **kw)
    from stable_baselines3.common.logger import configure
    model.set_logger(configure(str(out / "sb3_log"), []))  # not a new folder in the system's temp dir
    t0 = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - t0
    done = model.num_timesteps
    if algo == "ppo_lstm":
        class Recurrent:  # predict with the state carried, reset at each episode's start
            def reset(self):
                self.state, self.start = None, np.ones((1,), bool)
            def __call__(self, o):
                obs = venv.normalize_obs(np.asarray(o, np.float32)[None])
                a, self.state = model.predict(obs, state=self.state, episode_start=self.start, deterministic=True)
                self.start = np.zeros((1,), bool)
                return a[0]
        act = Recurrent()
        act.reset()
        result = evaluate(act, env_id, 20, 0)
    else:
        result = evaluate(lambda o: model.predict(o, deterministic=True)[0], env_id, 20, 0)
else:
    cfg = build_config(env_id, overrides={**overrides, "n_timesteps": steps, "eval_freq": 0, "eval_episodes": 1}, algo=algo)
    out.mkdir(parents=True, exist_ok=True)
    prof = None
    if os.environ.get("RL2EDGE_PROFILE"):
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    r = train("tf" if who == "tf" else "torch", env_id, cfg, seed, out, device="cpu", progress=False, threads=threads,
              compile_update=who == "torch-compile", matmul_precision="medium" if who == "torch-bf16" else "highest")
    wall, done = r.wall_time_s, r.steps
    if prof is not None:
        import pstats
        prof.disable()
        st = pstats.Stats(prof).stats
        top = sorted(st.items(), key=lambda kv: -kv[1][2])[:12]
        rows = [{"function": k[2] if k[0] == "~" else f"{Path(k[0]).name}:{k[1]}({k[2]})", "ncalls": v[1], "tottime_s": v[2],
                 "cumtime_s": v[3]} for k, v in top]
        print(json.dumps({"profile": rows, "wall_s": wall, "steps": done}))
        sys.exit(0)
    from rl2edge.export.sources.checkpoint import source_from_checkpoint
    act = source_from_checkpoint(out).act
    result = evaluate(act, env_id, 20, 0)
print(json.dumps({"who": who, "steps": done, "wall_s": wall, "steps_per_s": done / wall,
                  "mean_return": result.mean, "std_return": result.std}))
"""

RAINBOW_OFF = {"dueling": False, "prioritized": False, "n_step": 1, "distributional": False, "noisy": False}


def contenders(algo: str, env_id: str) -> dict[str, tuple[str, str, str, dict[str, Any]]]:
    """key -> (label, runner, algo, hyperparameter overrides) of one benchmark run."""
    if algo in ("ppo", "a2c"):
        name = algo.upper()
        return {
            "torch": (f"rl2edge {name} (torch)", "torch", algo, {}),
            # train --compile: the wall time includes compiling, as a user's run does
            "torch-compile": (f"rl2edge {name} (torch, --compile)", "torch-compile", algo, {}),
            "tf": (f"rl2edge {name} (TF)", "tf", algo, {}),
            "sb3": (f"Stable-Baselines3 {name}", "sb3", algo, {}),
        }
    if algo in ("sac", "td3", "dqn"):
        name = algo.upper()
        # SAC's and TD3's 256-wide torch variants (DQN's 64-wide nets gain from neither): the written-out
        # step as torch.compile graphs, the wall time including compiling; and bfloat16 products where
        # oneDNN has them (AMX, AVX512-BF16), another run whose return is measured
        wide = {
            "torch-compile": (f"rl2edge {name} (torch, --compile)", "torch-compile", algo, {}),
            "torch-bf16": (f"rl2edge {name} (torch, --matmul-precision medium)", "torch-bf16", algo, {}),
        }
        return {
            "torch": (f"rl2edge {name} (torch)", "torch", algo, {}),
            **(wide if algo != "dqn" else {}),
            "tf": (f"rl2edge {name} (TF)", "tf", algo, {}),
            "sb3": (f"Stable-Baselines3 {name}", "sb3", algo, {}),
        }
    if algo == "ppo_lstm":
        return {
            "torch": ("rl2edge PPO-LSTM (torch)", "torch", algo, {}),
            "tf": ("rl2edge PPO-LSTM (TF)", "tf", algo, {}),
            # the same preset with a GRU in the LSTM's place (sb3-contrib has none to set beside it)
            "torch-gru": ("rl2edge PPO-GRU (torch)", "torch", algo, {"rnn_type": "gru"}),
            "tf-gru": ("rl2edge PPO-GRU (TF)", "tf", algo, {"rnn_type": "gru"}),
            "sb3": ("sb3-contrib RecurrentPPO", "sb3", algo, {}),
        }
    if algo != "rainbow":
        raise SystemExit(f"--algo {algo}: choose ppo, a2c, sac, td3, dqn, rainbow or ppo_lstm")
    from rl2edge.train.algos import get
    from rl2edge.train.core.config import load_preset

    dqn_preset = load_preset(get("dqn").preset_file(), env_id)
    off = {**dqn_preset, **RAINBOW_OFF, "double_q": False}  # SB3's DQN has no double Q
    return {
        "sb3": ("Stable-Baselines3 DQN (DQN preset)", "sb3", "dqn", {}),
        "torch-off": ("rl2edge Rainbow, all off (torch, DQN preset)", "torch", "rainbow", off),
        "tf-off": ("rl2edge Rainbow, all off (TF, DQN preset)", "tf", "rainbow", off),
        "torch-on": ("rl2edge Rainbow, all on (torch, Rainbow preset)", "torch", "rainbow", {}),
        "tf-on": ("rl2edge Rainbow, all on (TF, Rainbow preset)", "tf", "rainbow", {}),
    }


def run_one(
    key: str,
    spec: tuple[str, str, str, dict[str, Any]],
    env_id: str,
    steps: int,
    seed: int,
    tmp: Path,
    profile: bool = False,
    threads: int = 1,
) -> dict[str, Any]:
    _, who, algo, overrides = spec
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _RUNNER,
            who,
            algo,
            env_id,
            str(steps),
            str(seed),
            str(tmp / f"{key}-{seed}"),
            json.dumps(overrides),
            str(threads),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "TF_CPP_MIN_LOG_LEVEL": "3",
            **__import__("os").environ,
            "OMP_NUM_THREADS": str(threads),
            # torch.compile's on-disk cache, empty for every run: --compile's wall time includes a first
            # compile, as a user's first run on a machine does (later runs of the same graph load it)
            "TORCHINDUCTOR_CACHE_DIR": str(tmp / f"{key}-{seed}-inductor"),
            **({"RL2EDGE_PROFILE": "1"} if profile else {}),
        },
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{key} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _mlp_flops(dims: list[int], batch: int) -> float:
    """Forward FLOPs of a dense MLP: 2 per multiply-add."""
    return 2.0 * batch * sum(a * b for a, b in itertools.pairwise(dims))


def _matmul_gflops(lib: str, b: int, width: int, threads: int, n: int = 400) -> float:
    """GFLOP/s on a [b, width] x [width, width] matmul with `threads` threads, the best of 3 timings of
    n: the library's rate at the run's largest layer, next to the step's own mix of shapes."""
    if lib in ("torch", "torch-bf16"):
        import torch

        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision("medium" if lib == "torch-bf16" else "highest")
        x, w = torch.randn(b, width), torch.randn(width, width)
        mm = lambda: x @ w  # noqa: E731
    else:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        x, w = tf.random.normal([b, width]), tf.random.normal([width, width])
        mm = lambda: tf.matmul(x, w).numpy()  # noqa: E731
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            mm()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * b * width * width * n / best / 1e9


def _matmul_library(runner: str) -> str:
    """The library whose matmul a contender's dense layers run on: TF's or torch's (SB3 too), or torch's
    with bfloat16 products (train --matmul-precision medium)."""
    return {"tf": "tensorflow", "torch-bf16": "torch-bf16"}.get(runner, "torch")


def _formula_flops(algo: str, env_id: str, cfg: Any) -> tuple[float, str]:
    """FLOPs per gradient step from the networks' shapes (backward as twice the forward): the cross-check
    of the recorded matmuls."""
    import gymnasium as gym

    env = gym.make(env_id)
    obs = int(np.prod(env.observation_space.shape))
    act = int(env.action_space.n) if hasattr(env.action_space, "n") else int(env.action_space.shape[0])
    env.close()
    h, b = list(cfg.net_arch), cfg.batch_size
    if algo == "dqn":
        fq = _mlp_flops([obs, *h, act], b)
        extra = " and the online net's on the next observations (F, double Q)" if cfg.double_q else ""
        return (5 if cfg.double_q else 4) * fq, f"Q forward + backward (3F), the target's forward (F){extra}"
    fa = _mlp_flops([obs, *h, 2 * act if algo == "sac" else act], b)
    fc = _mlp_flops([obs + act, *h, 1], b)
    # The work the algorithm needs: critic step = targets (F_a + 2 F_c) + twins forward and backward
    # (6 F_c); actor step = actor forward and backward (3 F_a) + the critics forward and backward to
    # their action input only (2 F_c each). An implementation that also computes the critics' weight
    # gradients in the actor step (SB3's) does 2 F_c more per critic.
    if algo == "sac":
        return 4 * fa + 12 * fc, "4 F_actor + 12 F_critic"
    d = cfg.policy_delay  # TD3: one critic in the actor step, every policy_delay critic steps
    return fa + 8 * fc + (3 * fa + 2 * fc) / d, f"F_a + 8 F_c + (3 F_a + 2 F_c) / {d}"


def roofline(algo: str, env_id: str, steps: int, threads: int = 1, bf16: bool = False) -> dict[str, Any]:
    """The gradient steps of a run; per rl2edge backend, benchmarks.roofline's figures (the step's own
    matmuls replayed bare, the gradient step alone, an 8-wide net's step), each in a fresh process with
    the run's threads; and each library's bare rate at the run's largest layer. `bf16`: torch's figures
    again with bfloat16 products, for the torch-bf16 contender."""
    import os

    from rl2edge.train.algos import build_config

    cfg = build_config(env_id, overrides={"n_timesteps": steps}, algo=algo)
    per_env_step = (cfg.gradient_steps if cfg.gradient_steps > 0 else cfg.train_freq) / cfg.train_freq
    grad_steps = max(0, steps - cfg.learning_starts) * per_env_step
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": str(threads)}

    def child(args: list[str]) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"roofline {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    common = ["--algo", algo, "--env", env_id, "--threads", str(threads)]
    by_framework = {"torch": child(["-m", "benchmarks.roofline", "--framework", "torch", *common])}
    with tempfile.TemporaryDirectory() as tmp:
        recorded = Path(tmp) / "matmuls.json"
        recorded.write_text(json.dumps(by_framework["torch"]["matmuls"]))
        by_framework["tf"] = child(
            ["-m", "benchmarks.roofline", "--framework", "tf", *common, "--matmuls", str(recorded)]
        )
        if bf16:
            by_framework["torch-bf16"] = child(
                [
                    "-m",
                    "benchmarks.roofline",
                    "--framework",
                    "torch",
                    *common,
                    "--matmuls",
                    str(recorded),
                    "--matmul-precision",
                    "medium",
                ]
            )
    width, b = max(cfg.net_arch), cfg.batch_size
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from benchmarks.train_throughput import _matmul_gflops; "
        f"print(json.dumps(_matmul_gflops(sys.argv[2], {b}, {width}, {threads})))"
    )
    libraries = ["torch", "tensorflow", *(["torch-bf16"] if bf16 else [])]
    peak = {lib: child(["-c", code, str(ROOT), lib]) for lib in libraries}
    formula_flops, formula = _formula_flops(algo, env_id, cfg)
    torch_fig = by_framework["torch"]
    return {
        "gradient_steps": grad_steps,
        "gflop_per_gradient_step": torch_fig["gflop_per_gradient_step"],
        "matmuls_per_gradient_step": len(torch_fig["matmuls"]) / torch_fig["cycle"],
        "formula_gflop_per_gradient_step": formula_flops / 1e9,
        "formula": formula,
        "by_framework": {
            k: {kk: v for kk, v in f.items() if kk != "matmuls"} for k, f in by_framework.items()
        },
        # the step's own matmuls, bare, by library: the limit of a gradient step's time
        "matmul_s_by_library": {f["library"]: f["matmul_s"] for f in by_framework.values()},
        "peak_gflops_by_library": peak,
        "peak_shape": f"[{b}, {width}] x [{width}, {width}]",
    }


def _roofline_markdown(
    roof: dict[str, Any], summary: dict[str, Any], names: dict[str, str], runner: dict[str, str], threads: int
) -> str:
    """The roofline's paragraph and table; fills each contender's share of its library's limit into
    `summary` and the ceilings against SB3 into `roof`."""
    limit = roof["matmul_s_by_library"]
    rows = []
    for w in summary:
        lib = _matmul_library(runner[w])
        per_step = summary[w]["wall_s"] / roof["gradient_steps"]
        summary[w].update(
            matmul_library=lib, run_s_per_gradient_step=per_step, share_of_limit=limit[lib] / per_step
        )
        fig = roof["by_framework"].get(runner[w]) if runner[w] in ("torch", "tf", "torch-bf16") else None
        ms = lambda v: f"{1e3 * v:.2f}"  # noqa: E731
        rows.append(
            [
                names[w],
                ms(per_step),
                ms(fig["step_s"]) if fig else "-",
                f"{ms(limit[lib])} ({lib})",
                ms(fig["narrow_step_s"]) if fig else "-",
                f"{100 * summary[w]['share_of_limit']:.0f}%",
            ]
        )
    sb3 = summary.get("sb3", {}).get("run_s_per_gradient_step")
    ceilings = ""
    if sb3:
        # a trainer whose whole run took only its library's bare matmuls would reach this multiple of SB3
        roof["ceiling_vs_sb3"] = {lib: sb3 / s for lib, s in limit.items()}
        ceilings = (
            " At its library's limit over the whole run (env steps, sampling, elementwise work and dispatch "
            "taking no time) a trainer would reach "
            + ", ".join(f"{v:.2f}x ({lib})" for lib, v in roof["ceiling_vs_sb3"].items())
            + " SB3's steps/s."
        )
    gflop = roof["gflop_per_gradient_step"]
    rates = ", ".join(
        f"{lib} {gflop / s:.0f} GFLOP/s against {roof['peak_gflops_by_library'][lib]:.0f} at {roof['peak_shape']}"
        for lib, s in limit.items()
    )
    return (
        f"\n\nRoofline ({_threads_text(threads)}): a gradient step issues "
        f"{roof['matmuls_per_gradient_step']:.0f} matmuls, {gflop:.3f} GFLOP (recorded from the torch agent's step, "
        f"forward and backward, with their shapes and transposes; the shapes' formula, {roof['formula']}, gives "
        f"{roof['formula_gflop_per_gradient_step']:.3f}), {roof['gradient_steps']:.0f} gradient steps per run. "
        f"Replayed back to back on fresh operands, the step's matmuls run at {rates} (the small and transposed "
        "shapes run slower than the largest layer): the limit. The gradient step alone is the agent's own train "
        "call on random batches of the preset's shapes; the 8-wide step is the same agent with [8, 8] hidden "
        "layers, i.e. the per-op costs that do not grow with the width (dispatch, autograd or graph "
        "overhead, Python). Share of the limit: the library's matmul time over the run's time per gradient "
        f"step.{ceilings}\n\n"
        + markdown_table(
            [
                "contender",
                "run ms per gradient step",
                "gradient step alone ms",
                "its matmuls, bare ms",
                "8-wide step ms",
                "share of the limit",
            ],
            rows,
        )
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="ppo", help="ppo, a2c, sac, td3, dqn, rainbow or ppo_lstm")
    ap.add_argument("--env", default="CartPole-v1")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument(
        "--repeats", type=int, default=1, help="rounds; each runs every contender once, interleaved"
    )
    ap.add_argument("--who", help="comma-separated contenders (default: all of --algo's)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="after the timed rounds, run each rl2edge contender once more under cProfile and put its top "
        "entries (by own time) in the markdown",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per op for every contender (rl2edge's --threads, SB3's torch threads); results "
        "go to train_throughput_<algo>_t<N> when not 1",
    )
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads {args.threads}: give 1 or more")
    specs = contenders(args.algo, args.env)
    who = args.who.split(",") if args.who else list(specs)
    unknown = set(who) - set(specs)
    if unknown:
        raise SystemExit(f"--who {','.join(sorted(unknown))}: --algo {args.algo} has {', '.join(specs)}")
    names = {w: specs[w][0] for w in who}
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in who}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for w in who:
                res = run_one(w, specs[w], args.env, args.steps, r, Path(tmp), threads=args.threads)
                runs[w].append(res)
                print(
                    f"round {r}: {names[w]}: {res['steps_per_s']:.0f} steps/s, return {res['mean_return']:.1f}",
                    flush=True,
                )
        profiles = {}
        if args.profile:
            for w in who:
                if specs[w][1] != "sb3":
                    profiles[w] = run_one(
                        w,
                        specs[w],
                        args.env,
                        args.steps,
                        0,
                        Path(tmp) / "prof",
                        profile=True,
                        threads=args.threads,
                    )
    rows, summary = [], {}
    for w in who:
        sps = np.array([x["steps_per_s"] for x in runs[w]])
        ret = np.array([x["mean_return"] for x in runs[w]])
        summary[w] = {
            "steps_per_s_median": float(np.median(sps)),
            "mean_return": float(ret.mean()),
            "runs": runs[w],
        }
        rows.append(
            [
                names[w],
                f"{np.median(sps):.0f}",
                f"{np.median([x['wall_s'] for x in runs[w]]):.1f}",
                f"{ret.mean():.1f}",
                len(runs[w]),
            ]
        )
    base = summary.get("sb3", {}).get("steps_per_s_median")
    ratios = {w: summary[w]["steps_per_s_median"] / base for w in who if base}
    ref = REFERENCE.get(args.env) if args.algo == "ppo" else None
    preset = (
        "train/presets/dqn.yml and rainbow.yml"
        if args.algo == "rainbow"
        else f"train/presets/{args.algo}.yml"
    )
    md = (
        f"{args.algo.upper()} on {args.env}, preset {preset}, {args.steps} steps, {args.repeats} round(s), "
        f"{_threads_text(args.threads)} per op for every contender, each run in a fresh process; return: 20 deterministic episodes, seeds 0..19.\n\n"
        + markdown_table(["contender", "env steps/s (median)", "wall s", "mean return", "runs"], rows)
        + (
            "\n\nsteps/s relative to SB3 in this run: "
            + ", ".join(f"{names[w]} {v:.2f}x" for w, v in ratios.items())
            if ratios
            else ""
        )
        + (
            f"\n\nbenchmarks/reference.md (SB3, same preset, a machine like this): {ref['sb3_steps_per_s']} steps/s, return "
            f"{ref['sb3_return']}."
            if ref
            else ""
        )
    )
    roof = (
        roofline(args.algo, args.env, args.steps, args.threads, bf16="torch-bf16" in who)
        if args.algo in ("sac", "td3", "dqn")
        else None
    )
    if roof is not None:
        for w in who:
            summary[w]["wall_s"] = float(np.median([x["wall_s"] for x in runs[w]]))
        md += _roofline_markdown(roof, summary, names, {w: specs[w][1] for w in who}, args.threads)
    for w, prof in profiles.items():
        md += (
            f"\n\nWhere the time goes: {names[w]}, one run under cProfile ({prof['wall_s']:.1f} s of training with "
            "the profiler's own overhead), the top entries by own time:\n\n"
            + markdown_table(
                ["function", "calls", "own s", "cumulative s"],
                [
                    [p["function"], p["ncalls"], f"{p['tottime_s']:.2f}", f"{p['cumtime_s']:.2f}"]
                    for p in prof["profile"]
                ],
            )
        )
    data = {
        "profiles": profiles,
        "roofline": roof,
        "algo": args.algo,
        "env_id": args.env,
        "steps": args.steps,
        "repeats": args.repeats,
        "threads": args.threads,
        "results": summary,
        "ratio_to_sb3": ratios,
    }
    name = "train_throughput" if args.algo == "ppo" else f"train_throughput_{args.algo}"
    if args.threads != 1:
        name += f"{'_ppo' if args.algo == 'ppo' else ''}_t{args.threads}"
    write_results(name, data, md, Path(args.out))
    _plot(summary, names, Path(args.out) / f"{name}.png", args.env, args.algo)
    print(md)
    return data


def _threads_text(n: int) -> str:
    return "one thread" if n == 1 else f"{n} threads"


def _plot(summary: dict[str, Any], names: dict[str, str], path: Path, env_id: str, algo: str) -> None:
    plt = pyplot()
    if plt is None:
        print(f"matplotlib is not installed: no {path.name}")
        return

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(summary) + 1.4))
    ax.barh(
        [names[w] for w in summary],
        [summary[w]["steps_per_s_median"] for w in summary],
        color=[f"C{i}" for i in range(len(summary))],
    )
    for i, w in enumerate(summary):
        ax.text(
            summary[w]["steps_per_s_median"],
            i,
            f" return {summary[w]['mean_return']:.0f}",
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("env steps / s (higher is better)")
    ax.set_title(f"{algo.upper()} training throughput, {env_id}")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
