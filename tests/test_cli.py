"""The `rl2edge` command as users and outside scripts call it: exact spellings, exit codes, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from testkit.cli import assert_clean_failure, rl2edge


@pytest.mark.parametrize("cmd", ["train", "tune", "export", "evaluate"])
def test_help_has_an_example(cmd: str) -> None:
    proc = rl2edge(cmd, "--help")
    assert proc.returncode == 0 and "example" in proc.stdout and f"rl2edge {cmd}" in proc.stdout


@pytest.mark.integration  # 10-30 s: the integration tier, which CI runs too (make test stays under 15 min)
def test_train_export_evaluate_with_the_documented_spellings(tmp_path: Path) -> None:
    run, art = tmp_path / "run", tmp_path / "art"
    proc = rl2edge(
        "train",
        "--algo",
        "ppo",
        "--framework",
        "torch",
        "--env",
        "CartPole-v1",
        "--steps",
        "2048",
        "--seed",
        "0",
        "--out",
        run,
    )
    assert proc.returncode == 0, proc.stderr
    assert "eval return" in proc.stdout and (run / "checkpoint.json").is_file()
    proc = rl2edge(
        "export", run, "--quantize", "int8", "--out", art, "--calib-episodes", "2", "--eval-episodes", "2"
    )
    assert proc.returncode == 0, proc.stderr
    assert "policy.tflite" in proc.stdout and "export success" in proc.stdout
    for noise in NATIVE_NOISE:  # TensorFlow's, absl's and the converter's own output: not the user's business
        assert noise not in proc.stdout + proc.stderr, noise
    proc = rl2edge("evaluate", art, "--env", "CartPole-v1", "--episodes", "3", "--seed", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["returns"]) == 3 and result["mean_return"] == pytest.approx(sum(result["returns"]) / 3)
    assert {"std_return", "backend"} <= set(result) and result["quantization"] == "int8"


NATIVE_NOISE = ("W0000", "E0000", "I0000", "fully_quantize", "cuDNN", "XNNPACK delegate")


def test_native_output_is_hidden_unless_verbose(cartpole_all) -> None:
    """LiteRT prints its delegate line from C++ on every load: off the terminal by default, shown with -v."""
    _, root = cartpole_all
    args = ("evaluate", root / "fp32", "--env", "CartPole-v1", "--episodes", "1", "--json")
    quiet, verbose = rl2edge(*args), rl2edge("-v", *args)
    assert quiet.returncode == 0 and verbose.returncode == 0, quiet.stderr + verbose.stderr
    assert "XNNPACK delegate" not in quiet.stdout + quiet.stderr
    assert "XNNPACK delegate" in verbose.stdout + verbose.stderr
    assert json.loads(quiet.stdout.strip().splitlines()[-1])["episodes"] == 1  # Python's own output kept


def test_unknown_env_is_a_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    proc = rl2edge("train", "--env", "NoSuchEnv-v0", "--steps", "100", "--out", tmp_path / "run")
    assert_clean_failure(proc, "unknown environment id 'NoSuchEnv-v0'")
    assert not (tmp_path / "run").exists()


def test_train_refuses_a_used_out_dir(cartpole_run: Path) -> None:
    before = (cartpole_run / "checkpoint.json").read_bytes()
    proc = rl2edge("train", "--env", "CartPole-v1", "--steps", "100", "--out", cartpole_run)
    assert_clean_failure(proc, "not empty", "--force")
    assert (cartpole_run / "checkpoint.json").read_bytes() == before


def test_missing_checkpoint(tmp_path: Path) -> None:
    assert_clean_failure(rl2edge("export", tmp_path / "nope", "--out", tmp_path / "art"), "does not exist")
    (tmp_path / "empty").mkdir()
    assert_clean_failure(
        rl2edge("export", tmp_path / "empty", "--out", tmp_path / "art"), "no checkpoint.json"
    )
    assert not (tmp_path / "art").exists()


def test_corrupted_checkpoint(cartpole_run: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(cartpole_run, bad)
    weights = bad / "policy.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16])
    assert_clean_failure(rl2edge("export", bad, "--out", tmp_path / "art"), "corrupted")
    (bad / "checkpoint.json").write_text('{"format": "rl2edge-checkpoint", ')
    assert_clean_failure(rl2edge("export", bad, "--out", tmp_path / "art"), "not valid JSON")
    assert not (tmp_path / "art").exists()


def test_a_checkpoint_whose_network_is_not_its_algorithms_is_refused(
    cartpole_run: Path, tmp_path: Path
) -> None:
    """Export rebuilds the network the algorithm's row names; a checkpoint claiming another is refused
    by name rather than failing on missing weights."""
    bad = tmp_path / "bad"
    shutil.copytree(cartpole_run, bad)
    meta = json.loads((bad / "checkpoint.json").read_text())
    meta["network"]["type"] = "dqn_mlp"
    (bad / "checkpoint.json").write_text(json.dumps(meta))
    assert_clean_failure(
        rl2edge("export", bad, "--out", tmp_path / "art"),
        "network type 'dqn_mlp' is not ppo's ('actor_critic_mlp')",
    )
    assert not (tmp_path / "art").exists()


def test_tampered_artifact(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    art = tmp_path / "art"
    shutil.copytree(root / "fp32", art)
    with open(art / "policy.tflite", "ab") as f:
        f.write(b"\0")
    assert_clean_failure(rl2edge("evaluate", art, "--env", "CartPole-v1", "--episodes", "1"), "sha256")
    assert_clean_failure(
        rl2edge("evaluate", root / "fp32", "--env", "Nope-v1", "--episodes", "1"), "unknown environment"
    )


@pytest.mark.parametrize(
    ("spelling", "target", "argv"),
    [  # the spellings of the README, docs/jetson.md and `rl2edge bench --help`
        ("bench latency artifacts/cp", "rl2edge.runtime.bench", ["artifacts/cp"]),
        (
            "bench latency artifacts/cp --calls 1000 --out /tmp",
            "rl2edge.runtime.bench",
            ["artifacts/cp", "--calls", "1000", "--out", "/tmp"],
        ),
        ("bench latency --suite", "benchmarks/latency.py", ["--suite"]),
        (
            "bench latency --suite --policies mlp64",
            "benchmarks/latency.py",
            ["--suite", "--policies", "mlp64"],
        ),
        (
            "bench loop_latency artifacts/cp --cycles 1000",
            "benchmarks/loop_latency.py",
            ["--artifact", "artifacts/cp", "--cycles", "1000"],
        ),
        (
            "bench loop_latency -- --artifact artifacts/cp --cycles 1000",
            "benchmarks/loop_latency.py",
            ["--artifact", "artifacts/cp", "--cycles", "1000"],
        ),
        ("bench train_throughput -- --repeats 2", "benchmarks/train_throughput.py", ["--repeats", "2"]),
    ],
)
def test_bench_spellings_reach_what_they_say(spelling: str, target: str, argv: list[str]) -> None:
    from rl2edge.cli.app import parse_args
    from rl2edge.cli.commands.bench import bench_plan

    assert bench_plan(parse_args(spelling.split())) == (target, argv)


def test_bench_latency_of_an_artifact_runs_from_the_installed_package(cartpole_all, tmp_path: Path) -> None:
    proc = rl2edge(
        "bench", "latency", cartpole_all[1] / "int8", "--calls", "100", "--out", tmp_path, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "latency_artifact.json").read_text())
    assert {r["form"] for r in data["rows"]} == {"TFLite int8 invoke", "TFLite int8 predict"}
    assert "predict adds" in proc.stdout
    assert_clean_failure(rl2edge("bench", "latency"), "needs an ARTIFACT or --suite")
    assert rl2edge("evaluate", "x", "--bogus").returncode == 2  # unknown options outside bench are errors


def test_bad_values_are_one_line_errors_before_anything_runs(cartpole_all, tmp_path: Path) -> None:
    """Each case used to end in a traceback, a busy loop, NaN, or a result lost at the end of a run."""
    art = cartpole_all[1] / "fp32"
    ok_map = (Path(__file__).parents[1] / "docs" / "examples" / "plant.yaml").read_text()
    bad_map = tmp_path / "bad.yaml"
    serve = ["serve", art, "--endpoint", "opc.tcp://127.0.0.1:4840"]
    cases: list[tuple[list[Any], str]] = [
        (["serve", art, "--endpoint", "opc.tcp://[::1"], "is not a valid URL"),
        (["serve", art, "--endpoint", "opc.tcp://:4840"], "has no host"),
        ([*serve, "--summary", tmp_path], "is a directory"),
        ([*serve, "--summary", tmp_path / "no" / "s.json"], "does not exist"),
        ([*serve, "--timeout-ms", "0"], "--timeout-ms: '0' is out of range"),
        ([*serve, "--map", bad_map], "obs_range_tolerance must be a number"),
        (
            ["plc-sim", "--env", "CartPole-v1", "--period-ms", "0"],
            "--period-ms: '0' is out of range: give a finite number from 1 to 60000 ms",
        ),
        (["evaluate", art, "--env", "CartPole-v1", "--episodes", "0"], "--episodes: '0' is out of range"),
        (["certs", "--out", tmp_path, "--name", ""], "a plain name"),
        (["certs", "--out", tmp_path, "--name", "../../x"], "a plain name"),
        (["certs", "--out", tmp_path, "--name", "plc", "--days", "-5"], "--days: '-5' is out of range"),
        (
            ["train", "--algo", "sac", "--env", "Pendulum-v1", "--threads", "0", "--out", tmp_path / "t"],
            "--threads: '0' is out of range",
        ),
    ]
    for args, fragment in cases:
        bad_map.write_text(ok_map.replace("obs_range_tolerance: 0.05", "obs_range_tolerance: abc"))
        assert_clean_failure(rl2edge(*args), fragment)
    bad_map.write_text(ok_map + "stale_ms: true\n")
    assert_clean_failure(rl2edge(*serve, "--map", bad_map), "stale_ms must be a time in milliseconds")
    assert rl2edge("certs", "--out", tmp_path, "--name", "plc", "--host", "localhost").returncode == 0
    assert_clean_failure(rl2edge("certs", "--out", tmp_path, "--name", "plc"), "a key is never overwritten")


def test_plc_sim_that_cannot_listen_is_one_line(tmp_path: Path) -> None:
    """A port in use and a host that does not resolve: tracebacks of OSError and gaierror before."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sim = ["plc-sim", "--env", "CartPole-v1", "--endpoint"]
        assert_clean_failure(rl2edge(*sim, f"opc.tcp://127.0.0.1:{port}"), "the port is in use")
    assert_clean_failure(rl2edge(*sim, "opc.tcp://no-such-plc.invalid:4840"), "does not resolve")


# ------------------------------------------------------------------ --config: one name, one meaning
# train's and tune's --config is a hyperparameter file; serve's is its options file (tests/test_serve_service.py).
# Before they were told apart, `train --config` crashed on serve's loader (AttributeError: config_parser).
@pytest.mark.parametrize(
    "text",
    [
        "learning_rate: 0.000777\ngamma: 0.97\n",  # flat
        "CartPole-v1:\n  learning_rate: 0.000777\n  gamma: 0.97\n",  # keyed by env id, as the Zoo's files
    ],
    ids=["flat", "keyed"],
)
def test_train_config_reaches_the_run(tmp_path: Path, text: str) -> None:
    (tmp_path / "hp.yml").write_text(text)
    run = tmp_path / "r"
    proc = rl2edge(
        "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "512", "--config", tmp_path / "hp.yml",
        "--out", run, "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    hp = json.loads((run / "checkpoint.json").read_text())["hyperparameters"]
    assert hp["learning_rate"] == 0.000777 and hp["gamma"] == 0.97
    assert hp["n_timesteps"] == 512  # --steps still overrides the file
    assert json.loads((run / "summary.json").read_text())["steps"] >= 512


def test_train_config_with_an_unknown_hyperparameter_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "hp.yml").write_text("learning_rat: 0.001\n")
    proc = rl2edge(
        "train", "--env", "CartPole-v1", "--config", tmp_path / "hp.yml", "--out", tmp_path / "r"
    )  # fmt: skip
    assert_clean_failure(proc, "learning_rat")
    assert not (tmp_path / "r").exists()


def test_tune_config_is_read_as_hyperparameters(tmp_path: Path) -> None:
    """Without Ray's start-up: a hyperparameter the space does not know gets tune's own one-line error,
    which shows the file reached the search space's loader (the old code crashed before it)."""
    (tmp_path / "hp.yml").write_text("learning_rat: 0.001\n")
    (tmp_path / "space.yml").write_text("space:\n  gamma: {uniform: [0.9, 0.99]}\n")
    proc = rl2edge(
        "tune", "--env", "CartPole-v1", "--space", tmp_path / "space.yml", "--config", tmp_path / "hp.yml",
        "--out", tmp_path / "sw",
    )  # fmt: skip
    assert_clean_failure(proc, "learning_rat")


def test_evaluate_takes_the_env_from_the_manifest(cartpole_all, tmp_path: Path) -> None:
    art = cartpole_all[1] / "fp32"
    given = rl2edge("evaluate", art, "--env", "CartPole-v1", "--episodes", "2", "--json")
    implied = rl2edge("evaluate", art, "--episodes", "2", "--json")
    assert given.returncode == 0 and implied.returncode == 0, implied.stderr
    a, b = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (given, implied))
    assert b["env_id"] == "CartPole-v1" and b["returns"] == a["returns"]
    # a manifest without its source's env id (an older or hand-made one): one line asking for --env
    bare = tmp_path / "bare"
    shutil.copytree(art, bare)
    manifest = json.loads((bare / "manifest.json").read_text())
    del manifest["source"]["env_id"]
    (bare / "manifest.json").write_text(json.dumps(manifest))
    assert_clean_failure(rl2edge("evaluate", bare, "--episodes", "1"), "give --env")


@pytest.mark.parametrize("missing", ["gymnasium", "torch"])
@pytest.mark.parametrize("command", ["train", "export"])
def test_an_edge_install_asked_to_train_or_export_names_the_whole_extra(
    cartpole_run: Path, tmp_path: Path, missing: str, command: str
) -> None:
    """Before: it asked for gymnasium, and once that was installed, for torch: one package a try. The
    edge install is simulated by making the package unimportable in the child."""
    import subprocess
    import sys

    args = {
        "train": ["train", "--algo", "ppo", "--env", "CartPole-v1", "--out", str(tmp_path / "r")],
        "export": ["export", str(cartpole_run), "--out", str(tmp_path / "a")],
    }[command]
    code = f"import sys; sys.modules[{missing!r}] = None\nfrom rl2edge.cli.app import main; sys.exit(main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "pip install 'rl2edge[train]'" in line and "Traceback" not in proc.stderr, line
