"""The `rl2edge` command. Each subcommand imports its package only when it runs, so that
`rl2edge evaluate` on the edge never loads torch and `rl2edge --help` is instant."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError, Rl2EdgeError
from rl2edge.interrupts import Interrupted, check_interrupted, interruptible

_logger = logging.getLogger("rl2edge")

QUANT_MODES = ("fp32", "fp16", "dynamic", "int8")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


# ----------------------------------------------------------------------------------------------- train
def _cmd_train(args: argparse.Namespace) -> int:
    from rl2edge.fileio import atomic_directory, check_output_dir
    from train.algos import build_config, train
    from train.core.envs import check_env_id

    check_env_id(args.env)
    overrides = {"n_timesteps": args.steps} if args.steps is not None else {}
    cfg = build_config(args.env, args.config, overrides, algo=args.algo)
    run_dir = Path(
        args.out
        or f"runs/{args.env.replace('/', '_').replace(':', '_')}_{args.algo}_{args.framework}_s{args.seed}"
    )
    check_output_dir(run_dir, force=args.force, what="train")
    _logger.info(
        "training %s/%s on %s for %d steps, seed %d -> %s",
        args.algo,
        args.framework,
        args.env,
        cfg.n_timesteps,
        args.seed,
        run_dir,
    )
    # The run is written beside --out and renamed onto it when complete: an interrupted or failed run
    # leaves --out as it was (with --force, the previous run stays until the new one is done).
    with atomic_directory(run_dir) as staging:
        _logger.info(
            "writing the run to %s until it is complete (TensorBoard: --logdir %s)", staging, staging / "tb"
        )
        result = train(
            args.framework,
            args.env,
            cfg,
            args.seed,
            staging,
            device=args.device,
            progress=None if not args.no_progress else False,
        )
        check_interrupted()
    print(
        _table(
            ["run", "steps", "wall s", "steps/s", "eval return"],
            [
                [
                    str(run_dir),
                    result.steps,
                    f"{result.wall_time_s:.1f}",
                    f"{result.steps_per_s:.0f}",
                    f"{result.final_eval.mean:.1f} +- {result.final_eval.std:.1f}",
                ]
            ],
        )
    )
    print(f"next: rl2edge export {run_dir} --quantize int8 --out artifacts/{run_dir.name}")
    return 0


# ---------------------------------------------------------------------------------------------- export
def _cmd_export(args: argparse.Namespace) -> int:
    from export.pipeline import ExportOptions, export_checkpoint, export_source

    opts = ExportOptions(
        quantize=args.quantize,
        calib_episodes=args.calib_episodes,
        eval_episodes=args.eval_episodes,
        seed=args.seed,
        force=args.force,
        progress=None if not args.no_progress else False,
        max_return_drop_pct=args.max_return_drop,
        noise=args.noise,
        noise_seed=args.noise_seed,
    )
    opts.check()
    src = Path(args.run_dir)
    out = Path(args.out) if args.out else Path("artifacts") / src.resolve().with_suffix("").name
    if src.suffix == ".zip":
        from export.sb3 import source_from_sb3

        report = export_source(
            source_from_sb3(src, args.env, Path(args.vecnormalize) if args.vecnormalize else None), out, opts
        )
    else:
        if args.env or args.vecnormalize:
            raise ConfigError(
                "--env and --vecnormalize are for Stable-Baselines3 .zip models; a run directory knows its env"
            )
        report = export_checkpoint(src, out, opts)
    print(report.table())
    print(report.footer())
    return 0


# -------------------------------------------------------------------------------------------- evaluate
def _cmd_evaluate(args: argparse.Namespace) -> int:
    from runtime.policy import Policy
    from train.core.envs import check_env_id
    from train.core.evaluation import evaluate

    check_env_id(args.env)
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes}: evaluate at least 1 episode")
    policy = Policy.load(
        args.artifact, backend=args.backend, explore=args.explore, noise_seed=args.noise_seed
    )
    result = evaluate(policy.predict, args.env, args.episodes, args.seed)
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
    if args.json:
        print(json.dumps(out))
    else:
        print(
            _table(
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
    return 0


# ----------------------------------------------------------------------------------- serve, plc-sim
def _security(args: argparse.Namespace, role: str):
    from plc_bridge.security import SecurityConfig, read_password, redact_in_logs

    trusted = (
        [args.server_cert]
        if role == "client" and args.server_cert
        else list(getattr(args, "trust", None) or [])
    )
    password = read_password(args.password_file) if args.user else None
    redact_in_logs(password)
    sec = SecurityConfig(
        mode=args.security,
        certificate=Path(args.cert) if args.cert else None,
        private_key=Path(args.key) if args.key else None,
        trusted=tuple(Path(p) for p in trusted),
        username=args.user,
        password=password,
        allow_plaintext_password=args.allow_plaintext_password,
    )
    sec.check(role)
    return sec


def _check_output_file(path: str | None, option: str) -> None:
    """Refuse at start, not at the end of a run whose result would then be lost, a path that cannot be written."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{option} {p} is a directory; name a file, e.g. {p / 'summary.json'}")
    if not p.parent.is_dir():
        raise ConfigError(f"{option} {p}: folder {p.parent} does not exist")
    if not os.access(p.parent, os.W_OK):
        raise ConfigError(f"{option} {p}: folder {p.parent} is not writable by this user")


def _run_until_signal(coro_factory: Callable[[Any], Any]) -> Any:
    """Run an async service; SIGINT and SIGTERM set its stop event (a clean exit, code 0)."""
    import asyncio
    import signal

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await coro_factory(stop)

    return asyncio.run(main())


def _cmd_serve(args: argparse.Namespace) -> int:
    from plc_bridge.client import BridgeConfig
    from plc_bridge.loop import ControlLoop, LoopConfig
    from plc_bridge.nodemap import load_node_map
    from rl2edge.fileio import write_json_atomic
    from runtime.policy import Policy

    _check_output_file(args.summary, "--summary")
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
        security=_security(args, "client"),
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
    summary = _run_until_signal(control.run)
    if args.summary:
        write_json_atomic(args.summary, summary)
    lat = summary["latency_ms"]
    print(
        _table(
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


def _cmd_plc_sim(args: argparse.Namespace) -> int:
    from plc_bridge.sim import PlcSim, SimConfig

    _check_output_file(args.record, "--record")
    cfg = SimConfig(
        env_id=args.env,
        seed=args.seed,
        endpoint=args.endpoint,
        mode=args.mode,
        period_ms=args.period_ms,
        episodes=args.episodes,
        record=Path(args.record) if args.record else None,
        security=_security(args, "server"),
        strict=args.strict,
    )
    sim = PlcSim(cfg)
    returns = _run_until_signal(sim.run)
    if returns:
        print(
            _table(
                ["episodes", "mean return", "returns"],
                [[len(returns), f"{sum(returns) / len(returns):.1f}", " ".join(f"{r:.0f}" for r in returns)]],
            )
        )
    return 0


def _cmd_certs(args: argparse.Namespace) -> int:
    from plc_bridge.security import make_certificate

    out = Path(args.out)
    cert, key = make_certificate(out, args.name, args.uri or f"urn:rl2edge:{args.name}", args.host, args.days)
    print(f"certificate: {cert}\nprivate key: {key} (keep it secret; mode 0600)")
    return 0


# ----------------------------------------------------------------------------------------------- bench
def bench_plan(args: argparse.Namespace) -> tuple[str, list[str]]:
    """What `rl2edge bench` runs: ("runtime.bench", argv) for one artifact's latency, which is in the
    installed package and runs on the device from the wheel; else (script of benchmarks/, argv)."""
    if args.what == "latency" and args.artifact and not args.suite:
        return "runtime.bench", [args.artifact, *args.rest]
    if args.what == "latency" and not args.suite:
        raise ConfigError("rl2edge bench latency needs an ARTIFACT or --suite")
    rest = ["--artifact", args.artifact, *args.rest] if args.artifact else list(args.rest)
    return f"benchmarks/{args.what}.py", [*(["--suite"] if args.suite else []), *rest]


def _cmd_bench(args: argparse.Namespace) -> int:
    import runpy

    target, argv = bench_plan(args)
    if target == "runtime.bench":
        from runtime.bench import main as bench_latency

        print(bench_latency(argv)[1])
        return 0
    script = Path(__file__).resolve().parents[1] / target
    if not script.is_file():
        raise ConfigError(
            f"`rl2edge bench {args.what}{' --suite' if args.suite else ''}` runs {target} of a source checkout "
            "(it needs the training stack), and this install has none; `rl2edge bench latency ARTIFACT` works anywhere"
        )
    sys.argv = [str(script), *argv]
    runpy.run_path(str(script), run_name="__main__")
    return 0


# ------------------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    from train.algos import ALGOS, FRAMEWORKS  # the table only: no framework is imported

    p = argparse.ArgumentParser(
        prog="rl2edge",
        description="Train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="quick start:\n"
        "  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge evaluate artifacts/cp --env CartPole-v1 --episodes 20 --seed 0 --json",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    t = sub.add_parser(
        "train",
        help="train a policy and write a checkpoint",
        formatter_class=fmt,
        description="Train a policy on a Gymnasium env and write a checkpoint directory (checkpoint.json + "
        "weights, no pickle), progress.csv and TensorBoard events.\nHyperparameters: the algorithm's defaults "
        "(SB3's), then the env's preset (train/presets/<algo>.yml, Zoo style), then --config FILE, then --steps.",
        epilog="examples:\n  rl2edge train --algo ppo --framework torch --env CartPole-v1 --steps 100000 --seed 0 --out runs/cp\n"
        "  rl2edge train --algo sac --framework tf --env Pendulum-v1 --seed 0 --out runs/pd-sac   # preset: 20k steps",
    )
    t.add_argument("--algo", default="ppo", choices=list(ALGOS), help="algorithm (default: ppo)")
    t.add_argument("--framework", default="torch", choices=FRAMEWORKS, help="backend (default: torch)")
    t.add_argument("--env", required=True, help="Gymnasium id (CartPole-v1) or package.module:EnvClass")
    t.add_argument("--steps", type=int, help="total env steps (default: the preset's n_timesteps)")
    t.add_argument(
        "--seed", type=int, default=0, help="seed; the same seed gives the same checkpoint (default: 0)"
    )
    t.add_argument("--config", help="YAML file of hyperparameters (flat, or keyed by env id as in the Zoo)")
    t.add_argument("--out", help="run directory (default: runs/<env>_<algo>_<framework>_s<seed>)")
    t.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="auto takes the GPU when there is one",
    )
    t.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser(
        "export",
        help="export a checkpoint to a verified TFLite artifact",
        formatter_class=fmt,
        description="Rebuild the deterministic policy with observation normalization and the action transform "
        "folded in, export ONNX (opset 17), convert to TFLite with onnx2tf, quantize with calibration data from "
        "rollouts of the trained policy, verify every file against the source, and write the artifact "
        "(manifest.json, policy.tflite, policy.onnx). Nothing is written when verification fails.\n"
        "Stable-Baselines3 models (PPO, A2C, SAC, TD3, DQN; MlpPolicy) export the same way, with VecNormalize's "
        "statistics folded in and the exported actions checked against SB3's own predict(). Loading an SB3 .zip "
        "or VecNormalize .pkl runs pickle: only load files you trust.",
        epilog="examples:\n  rl2edge export runs/cp --quantize int8 --out artifacts/cp\n"
        "  rl2edge export runs/cp --quantize all --out artifacts/cp   # one artifact per mode in artifacts/cp/<mode>/\n"
        "  rl2edge export ppo_pendulum.zip --env Pendulum-v1 --vecnormalize vecnormalize.pkl --quantize auto --out artifacts/pd\n"
        "  rl2edge export runs/pd-td3 --quantize int8 --noise ou:theta=0.15,sigma=0.2 --out artifacts/pd-explore",
    )
    e.add_argument(
        "run_dir", help="checkpoint directory written by `rl2edge train`, or a Stable-Baselines3 model.zip"
    )
    e.add_argument(
        "--quantize",
        default="int8",
        choices=[*QUANT_MODES, "all", "auto"],
        help="quantization mode (default: int8); all: one artifact per mode; auto: the fastest mode whose "
        "closed-loop return stays within --max-return-drop of fp32's",
    )
    e.add_argument(
        "--max-return-drop",
        type=float,
        default=1.0,
        metavar="PCT",
        help="--quantize auto: allowed drop of the mean return below fp32's, in %% of |fp32| (default: 1)",
    )
    e.add_argument(
        "--env", help="Stable-Baselines3 models only: the Gymnasium env id the model was trained on"
    )
    e.add_argument("--vecnormalize", help="Stable-Baselines3 models only: the VecNormalize statistics (.pkl)")
    e.add_argument("--out", help="artifact directory (default: artifacts/<run name>)")
    e.add_argument(
        "--calib-episodes",
        type=int,
        default=10,
        help="episodes of the trained policy for calibration and parity data",
    )
    e.add_argument("--eval-episodes", type=int, default=10, help="episodes of closed-loop return per file")
    e.add_argument("--seed", type=int, default=0, help="seed of the calibration and evaluation episodes")
    e.add_argument(
        "--noise",
        help="fold exploration noise into the graph (Box actions): gaussian:sigma=0.1 | "
        "ou:theta=0.15,sigma=0.2[,dt=0.01] | policy (SAC's or PPO's own distribution)",
    )
    e.add_argument(
        "--noise-seed",
        type=int,
        default=0,
        help="seed of the runtime's noise draws, recorded in the manifest",
    )
    e.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=_cmd_export)

    v = sub.add_parser(
        "evaluate",
        help="run an artifact in its environment",
        formatter_class=fmt,
        description="Run an artifact through the runtime (the code that serves it on the device) for N episodes "
        "with seeds S, S+1, ... and report the returns.",
        epilog="example:\n  rl2edge evaluate artifacts/cp --env CartPole-v1 --episodes 20 --seed 0 --json",
    )
    v.add_argument("artifact", help="artifact directory (manifest.json + policy.tflite)")
    v.add_argument("--env", required=True, help="Gymnasium id or package.module:EnvClass")
    v.add_argument("--episodes", type=int, default=20, help="episodes (default: 20)")
    v.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0)")
    v.add_argument(
        "--explore",
        action="store_true",
        help="artifacts with folded noise: sample it (default: deterministic)",
    )
    v.add_argument("--noise-seed", type=int, help="artifacts with folded noise: override the manifest's seed")
    v.add_argument(
        "--backend", default="auto", help="auto, litert, tflite-runtime, tensorflow or onnxruntime"
    )
    v.add_argument(
        "--json", action="store_true", help="print one JSON object (mean_return, std_return, returns, ...)"
    )
    v.set_defaults(func=_cmd_evaluate)

    def security_options(sp: argparse.ArgumentParser, role: str) -> None:
        g = sp.add_argument_group("security")
        g.add_argument(
            "--security",
            default="none",
            choices=["none", "sign", "sign_and_encrypt"],
            help="message security, Basic256Sha256 (default: none)",
        )
        g.add_argument("--cert", help="this application's certificate (DER/PEM; see `rl2edge certs`)")
        g.add_argument("--key", help="this application's private key (PEM)")
        if role == "client":
            g.add_argument("--server-cert", help="the PLC's certificate, trusted explicitly")
        else:
            g.add_argument("--trust", action="append", help="a client certificate to trust (repeatable)")
        g.add_argument("--user", help="username" + (" required of clients" if role == "server" else ""))
        g.add_argument(
            "--password-file", help="file whose first line is the password (else $RL2EDGE_OPCUA_PASSWORD)"
        )
        g.add_argument(
            "--allow-plaintext-password",
            action="store_true",
            help="with --security none, send (or accept) the password unencrypted; warned at every start",
        )

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
    security_options(s, "client")
    s.set_defaults(func=_cmd_serve)

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
    ps.add_argument("--env", required=True, help="Gymnasium id or package.module:EnvClass")
    ps.add_argument("--seed", type=int, default=0, help="seed of the first episode (default: 0)")
    ps.add_argument("--endpoint", default="opc.tcp://127.0.0.1:4840", help="where to listen")
    ps.add_argument("--mode", default="lockstep", choices=["lockstep", "realtime"])
    ps.add_argument("--period-ms", type=float, default=20.0, help="realtime mode: plant step period")
    ps.add_argument("--episodes", type=int, help="stop after N episodes")
    ps.add_argument("--record", help='write {"returns": [...]} here when stopping')
    ps.add_argument(
        "--strict",
        action="store_true",
        help="refuse writes whose type or shape is not the node's (BadTypeMismatch), as real PLCs do",
    )
    security_options(ps, "server")
    ps.set_defaults(func=_cmd_plc_sim)

    c = sub.add_parser(
        "certs",
        help="make a self-signed OPC UA application certificate and key",
        formatter_class=fmt,
        description="For tests and commissioning: a self-signed application certificate (DER) with the "
        "application URI and host in subjectAltName, and its RSA key (PEM, mode 0600).",
        epilog="example:\n  rl2edge certs --out pki --name serve && rl2edge certs --out pki --name plc",
    )
    c.add_argument("--out", required=True, help="directory for NAME.der and NAME.key.pem")
    c.add_argument("--name", required=True, help="application name (the certificate's CN)")
    c.add_argument("--uri", help="application URI (default: urn:rl2edge:NAME)")
    c.add_argument("--host", help="host name in subjectAltName (default: this host)")
    c.add_argument("--days", type=int, default=365, help="validity (default: 365)")
    c.set_defaults(func=_cmd_certs)

    b = sub.add_parser(
        "bench",
        help="run a benchmark (latency, loop_latency, train_throughput, quantization)",
        formatter_class=fmt,
        description="`latency ARTIFACT` measures one artifact with the runtime alone (numpy + an interpreter): it "
        "runs on the device from the wheel and writes latency_artifact.json/.md to --out (default: .). The rest "
        "runs a script of the source tree's benchmarks/ (a checkout with the training stack); results go to "
        "benchmarks/results/ as JSON, markdown and PNG. Options after the ARTIFACT (or after --) go to the script.",
        epilog="examples:\n  rl2edge bench latency artifacts/cp\n  rl2edge bench latency artifacts/cp --calls 1000 --out /tmp\n"
        "  rl2edge bench latency --suite\n"
        "  rl2edge bench loop_latency artifacts/cp --cycles 1000\n"
        "  rl2edge bench loop_latency -- --artifact artifacts/cp --cycles 1000",
    )
    b.add_argument("what", choices=["latency", "loop_latency", "train_throughput", "quantization"])
    b.add_argument("artifact", nargs="?", help="latency: the artifact to measure")
    b.add_argument(
        "--suite", action="store_true", help="latency: MLP 64x64, MLP 256x256, Nature-CNN in every form"
    )
    b.set_defaults(func=_cmd_bench)
    return p


def _one_line_asyncua(record: logging.LogRecord) -> bool:
    if record.name.startswith("asyncua") and record.exc_info:
        kind = record.exc_info[0].__name__ if record.exc_info[0] else "error"
        record.msg = f"{record.msg} ({kind}; -v for the traceback)"
        record.exc_info = None
        record.exc_text = None
    return True


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`bench` passes options it does not know (and all after `--`) on to its script in `args.rest`;
    argparse.REMAINDER would swallow `--suite` after the optional ARTIFACT too."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    tail: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tail = argv[:cut], argv[cut + 1 :]
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        args.rest = [*rest, *tail]
    elif rest or tail:
        parser.error(f"unrecognized arguments: {' '.join([*rest, *tail])}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ start-up noise out
    args = parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    for noisy in ("tensorflow", "absl", "onnx2tf", "h5py", "matplotlib"):
        logging.getLogger(noisy).setLevel(max(level, logging.ERROR))
    # asyncua logs every Read and Write at INFO: 100 lines a second at a 20 ms period. Its warnings stay,
    # without the tracebacks it attaches to what rl2edge reports in one line itself (-v shows them).
    logging.getLogger("asyncua").setLevel(level if args.verbose else logging.WARNING)
    if not args.verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_one_line_asyncua)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        if args.command in ("train", "export"):  # they write: a stop request must clean up, not kill
            with interruptible():
                return func(args)
        return func(args)
    except Rl2EdgeError as exc:
        print(f"rl2edge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(
            f"rl2edge {args.command}: interrupted by {exc}; nothing was written (--out is as it was)",
            file=sys.stderr,
        )
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"rl2edge {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # e.g. `train` or `evaluate` on the edge install, which has no torch
        root = (exc.name or "").split(".")[0]
        if root == "gymnasium":  # evaluate and plc-sim need the environments only
            fix = "pip install 'gymnasium>=1.0,<1.3' (the environments alone; no training stack needed)"
        else:
            fix = "the edge install serves artifacts only: pip install 'rl2edge[train]' on a workstation for the rest"
        print(
            f"rl2edge {args.command}: error: this command needs the Python package {root!r}, which is not installed; {fix}",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
