"""`rl2edge train --nproc N` (train.data_parallel): a data-parallel learner on torch.distributed with gloo, run
through the real CLI on this 2-core machine.

Tolerance of the parity tests: 1e-5 on every weight after the first update. The two jobs step the same
envs with the same per-env seeds and sampling noise (train.core.rollout_collector) and cut the same
minibatches. Two things differ in float32 rounding only: each rank acts on a batch of its own 2 envs'
rows, not of all 4 (another matmul blocking: some 1e-9 in a logit or value, which flips no sample short of
a tie that close), and the gradient's sum over samples is cut in two, the shares' sums added by an
all-reduce (some 1e-7 relative), which Adam's step (lr 1e-3, eps 1e-5) keeps far below 1e-5 (measured on
this machine: 6e-8 for PPO, 3e-8 for ppo_lstm). A mistake (a share's gradient not averaged, averaged
unweighted over unequal shares, advantages normalized per share, one rank's statistics) moves weights by
1e-4 to 1e-2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

from rl2edge.cli.app import main
from testkit.cli import EXE, rl2edge

TOL = 1e-5

# One rollout (one update) of 4 envs x 32 steps: 2 shares of 2 envs; minibatches of 64 samples (ppo) or of
# two whole env sequences (ppo_lstm). Statistics per rollout in both jobs (the only mode --nproc has).
CASES = {
    "ppo": "norm_obs_update: rollout\nn_envs: 4\nn_steps: 32\nbatch_size: 64\nn_epochs: 3\n",
    "ppo_lstm": "norm_obs_update: rollout\nn_envs: 4\nn_steps: 32\nbatch_size: 64\nn_epochs: 2\nlstm_hidden_size: 16\n",
}


def _train(tmp: Path, algo: str, name: str, *extra: str) -> Path:
    cfg = tmp / f"{algo}.yml"
    cfg.write_text(CASES[algo])
    out = tmp / name
    args = ["-q", "train", "--algo", algo, "--env", "CartPole-v1", "--steps", "128", "--device", "cpu"]
    assert main([*args, "--config", str(cfg), "--out", str(out), "--no-progress", *extra]) == 0
    return out


@pytest.mark.parametrize("algo", list(CASES))
def test_two_processes_make_the_first_update_one_process_makes(algo: str, tmp_path: Path) -> None:
    one = _train(tmp_path, algo, "one")
    two = _train(tmp_path, algo, "two", "--nproc", "2")
    a, b = load_file(one / "policy.safetensors"), load_file(two / "policy.safetensors")
    assert a.keys() == b.keys()
    worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    assert worst <= TOL, f"{algo}: max |weight difference| {worst:.2e}"
    ca, cb = (json.loads((d / "checkpoint.json").read_text()) for d in (one, two))
    assert ca["world_size"] == 1 and cb["world_size"] == 2
    # the statistics of every env's observations, not rank 0's share: the same numbers from the same data
    np.testing.assert_allclose(cb["normalization"]["mean"], ca["normalization"]["mean"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(cb["normalization"]["var"], ca["normalization"]["var"], rtol=0, atol=1e-9)
    assert ca["normalization"]["count"] == cb["normalization"]["count"]
    summary = json.loads((two / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 128  # --steps is the whole job's


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (["--algo", "dqn", "--nproc", "2"], {}, "--nproc runs a data-parallel learner for"),
        (["--algo", "ppo", "--framework", "tf", "--nproc", "2"], {}, "use --framework torch"),
        (["--algo", "ppo", "--per-process"], {}, "--per-process sizes each process of --nproc N"),
        (["--algo", "ppo", "--nproc", "16"], {}, "set n_envs to 16 or more"),
        # the preset's n_steps 32, and one sequence per minibatch
        (
            ["--algo", "ppo_lstm", "--nproc", "2", "--config", "BATCH32"],
            {},
            "set batch_size to n_steps x 2 (64)",
        ),
        (["--algo", "ppo", "--nproc", "2", "--seeds", "0,1"], {}, "does not combine with --seeds"),
        # more GPUs than any machine here has (none on CI): refused before four processes start and fail
        (
            ["--algo", "ppo", "--nproc", "64", "--per-process", "--device", "cuda"],
            {},
            "--nproc 64 --device cuda",
        ),
        (["--algo", "ppo", "--nproc", "3"], {"WORLD_SIZE": "2", "RANK": "0"}, "leave --nproc out"),
        (
            ["--algo", "ppo"],
            {"WORLD_SIZE": "2", "RANK": "x"},
            "RANK or LOCAL_RANK is missing or not an integer",
        ),
    ],
)
def test_a_job_that_cannot_run_is_refused_before_any_process_starts(
    args: list[str], env: dict[str, str], fragment: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "run"
    (tmp_path / "b.yml").write_text("batch_size: 32\n")
    args = [str(tmp_path / "b.yml") if a == "BATCH32" else a for a in args]
    assert main(["train", "--env", "CartPole-v1", "--device", "cpu", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert fragment in err, err
    assert not out.exists()


def _rank_pids(parent: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.parametrize(
    ("target", "sig", "code", "said"),
    [
        ("rank 1", signal.SIGKILL, 2, "rank 1 of 2 was killed by SIGKILL"),
        # a service manager's stop of the command: the supervisor passes it on to every rank
        pytest.param("supervisor", signal.SIGTERM, 143, "interrupted by SIGTERM; nothing was written",
                     marks=pytest.mark.integration),
    ],
)  # fmt: skip
def test_a_rank_killed_mid_run_stops_the_job_in_seconds_and_keeps_the_previous_run(
    target: str, sig: int, code: int, said: str, tmp_path: Path
) -> None:
    """SIGKILL to rank 1 (the OOM killer's way), or SIGTERM to the command, while both ranks train: the job
    exits non-zero with one line saying which, no rank is left running, and the run that --out held (this
    job had --force) is intact, with no staging folder beside it."""
    out = tmp_path / "run"
    first = rl2edge("train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "256", "--device", "cpu",
                    "--out", out, "--no-progress")  # fmt: skip
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    proc = subprocess.Popen(
        [EXE, "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "10000000", "--nproc", "2",
         "--device", "cpu", "--out", str(out), "--force", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob(".run.*.partial/progress.csv")):  # rank 0 has logged an update
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        ranks = _rank_pids(proc.pid)
        assert len(ranks) == 2
        os.kill(ranks[1] if target == "rank 1" else proc.pid, sig)  # ranks start in rank order
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code and "Traceback" not in err, err[-3000:]
    assert said in err.strip().splitlines()[-1]
    assert took < 15, f"the job took {took:.1f} s to stop"
    for pid in ranks:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


@pytest.mark.integration
def test_two_torchrun_nodes_train_one_run_that_exports_and_serves_like_any_other(tmp_path: Path) -> None:
    """Two torchrun agents, as two nodes would start them (--nnodes 2, static rendezvous at node 0's
    address; here both on loopback), one process each: torchrun, not rl2edge, starts the ranks. Node 0's
    rank 0 writes the run; `rl2edge export` verifies its int8 file against it, and serve over OPC UA gives
    the returns evaluate gives."""
    from benchmarks.train_scaling import torchrun_nodes
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import served_returns

    out = tmp_path / "run"
    train = ["train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "8192", "--device", "cpu",
             "--out", str(out), "--no-progress"]  # fmt: skip
    pipe: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    nodes = [subprocess.Popen(command, **pipe) for command in torchrun_nodes(train)]
    logs = [n.communicate(timeout=600)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(log[-2000:] for log in logs)
    assert "| processes |" in logs[0] and "| processes |" not in logs[1]  # rank 0 reports the job
    ckpt = json.loads((out / "checkpoint.json").read_text())
    assert ckpt["world_size"] == 2 and ckpt["total_timesteps"] == 8192
    art = tmp_path / "int8"
    proc = rl2edge("export", out, "--quantize", "int8", "--out", art, "--calib-episodes", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = evaluate(Policy.load(art).predict, "CartPole-v1", 2, 3).returns
    assert served_returns(art, "CartPole-v1", 2, 3, tmp_path) == expected


def test_per_process_budgets_make_the_job_n_times_the_config(tmp_path: Path) -> None:
    """--per-process: the config's n_envs, steps and batch_size are each process's (rsl-rl's convention), so
    a 2-process job of n_envs 2 and 64 steps collects 128 steps from 4 envs in minibatches of 64."""
    cfg = tmp_path / "c.yml"
    cfg.write_text("n_envs: 2\nn_steps: 32\nbatch_size: 32\nn_epochs: 1\n")
    out = tmp_path / "run"
    args = ["-q", "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "64", "--device", "cpu",
            "--config", str(cfg), "--nproc", "2", "--per-process", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    ckpt = json.loads((out / "checkpoint.json").read_text())
    hp = ckpt["hyperparameters"]
    assert (hp["n_envs"], hp["n_timesteps"], hp["batch_size"]) == (4, 128, 64)
    assert ckpt["world_size"] == 2 and ckpt["total_timesteps"] == 128
