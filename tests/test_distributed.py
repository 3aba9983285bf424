"""Sweeps, seeds and distributed rollouts on a real Ray: a local one with 2 CPUs, and a two-node cluster on
this machine (Ray's own `ray.cluster_utils.Cluster`: a head and a worker node, each its own raylet, on
loopback). Equality of checkpoints is exact: the same code on the same CPU with one thread per run, and
the forward passes of a share of the envs padded to the run's full batch (train.core.rollout_collector).
"""

from __future__ import annotations

import json
import re
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from testkit.cli import assert_clean_failure, rl2edge
from testkit.runs import assert_same_weights

pytestmark = pytest.mark.serial("Ray clusters: a local one and a two-node one own ports and /tmp/ray")

ray = pytest.importorskip("ray")

# PPO on CartPole, 4 evaluations: learning rates from 1e-6 (learns nothing) to 3e-3 make a spread that
# ASHA acts on. Optuna's sampler is seeded, so the four configurations are the same in every run.
CARTPOLE_SPACE = """\
fixed:
  n_timesteps: 8192
  eval_freq: 2048
  eval_episodes: 3
space:
  learning_rate: {loguniform: [1.0e-6, 3.0e-3]}
  gae_lambda: {uniform: [0.8, 0.99]}
  net_arch: {choice: [[32, 32], [64, 64]]}
"""


# The ASHA test's space: a learning rate at which PPO learns nothing next to one at which it learns, and
# one rung, at 4096 steps (--grace-steps), where a learner is far ahead (500 against 42 on this machine),
# so that the decision does not rest on the near ties of barely trained nets (their returns move with the
# CPU's last bits; at 2048 steps it was 82 against 42). The trials run one at a time: with two at once,
# which one reaches the rung first, and so which is compared with which, is a race (CI failed on it).
# Optuna's seeded sampler draws 2e-3 first, then 1e-9 (a fixed sequence of random numbers, the same on
# every machine), so the second trial is stopped at the rung.
ASHA_SPACE = CARTPOLE_SPACE.replace(
    "learning_rate: {loguniform: [1.0e-6, 3.0e-3]}", "learning_rate: {choice: [1.0e-9, 2.0e-3]}"
)
assert ASHA_SPACE != CARTPOLE_SPACE


def _space_file(tmp_path: Path, text: str = CARTPOLE_SPACE) -> Path:
    path = tmp_path / "space.yml"
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ search spaces (no Ray)
@pytest.mark.parametrize(
    "text, fragment",
    [
        ("space: {learning_rat: {loguniform: [1e-4, 1e-3]}}", "'learning_rat' is not a PPO hyperparameter"),
        ("space: {learning_rate: {lognormal: [1e-4, 1e-3]}}", "unknown distribution 'lognormal'"),
        ("space: {learning_rate: {loguniform: [1e-3, 1e-4]}}", "needs low < high"),
        ("space: {learning_rate: {loguniform: [0, 1e-4]}}", "positive low bound"),
        ("space: {batch_size: {int: [1.5, 8]}}", "bounds must be integers"),
        ("space: {batch_size: {choice: [64, 0]}}", "the value 0 is not accepted"),
        ("space: {gamma: 0.99}", "must be one distribution"),
        ("learning_rate: {loguniform: [1e-4, 1e-3]}", "space:"),
        ("space: {n_timesteps: {choice: [1000, 2000]}}", "n_timesteps cannot be searched"),
        ("fixed: {gamma: 0.9}\nspace: {gamma: {uniform: [0.9, 0.99]}}", "both fixed and searched"),
        ("space: [1, 2", "search space"),
    ],
)
def test_a_bad_search_space_is_refused_before_ray_starts(tmp_path: Path, text: str, fragment: str) -> None:
    proc = rl2edge(
        "tune", "--env", "CartPole-v1", "--space", _space_file(tmp_path, text), "--out", tmp_path / "sw"
    )
    assert_clean_failure(proc, fragment)
    assert not (tmp_path / "sw").exists()


def test_search_space_decodes_list_choices_by_index(tmp_path: Path) -> None:
    from rl2edge.train.distributed.search_space import load_search_space

    space = load_search_space(_space_file(tmp_path), "ppo", "CartPole-v1")
    tune_space = space.to_tune()
    assert tune_space["net_arch"].categories == [0, 1]  # Optuna's categorical holds scalars only
    hp = space.decode({"learning_rate": 1e-4, "gae_lambda": 0.9, "net_arch": 1})
    assert hp["net_arch"] == [64, 64] and hp["n_timesteps"] == 8192


# ------------------------------------------------------------------------------ clear errors
def test_ray_missing_is_a_clear_error(tmp_path: Path) -> None:
    # A sitecustomize that makes `import ray` fail, as on an install without the [ray] extra.
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    import os
    import subprocess

    from testkit.cli import EXE

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    args = ["train", "--env", "CartPole-v1", "--steps", "256", "--seeds", "0,1", "--out", str(tmp_path / "r")]
    proc = subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=300)
    assert_clean_failure(proc, "pip install 'rl2edge[ray]'")


def test_an_address_that_does_not_answer_fails_in_seconds(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    proc = rl2edge(
        "train", "--env", "CartPole-v1", "--steps", "256", "--seeds", "0,1",
        "--address", f"127.0.0.1:{port}", "--out", tmp_path / "r",
    )  # fmt: skip
    assert_clean_failure(proc, f"no Ray cluster answers at 127.0.0.1:{port}")
    assert time.monotonic() - start < 60
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------------ a local Ray, 2 CPUs
@pytest.mark.integration
def test_asha_sweep_stops_a_trial_early_and_its_best_run_exports(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = rl2edge(
        "tune", "--algo", "ppo", "--env", "CartPole-v1", "--space", _space_file(tmp_path, ASHA_SPACE),
        "--trials", "4", "--max-concurrent", "1", "--grace-steps", "4096", "--out", out,
        "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "sweep.json").read_text())
    rows = report["trials_table"]
    assert len(rows) == 4 and report["status"]["error"] == 0
    stopped = [r for r in rows if r["status"] == "stopped early"]
    assert [r["hyperparameters"]["learning_rate"] for r in rows[:2]] == [2e-3, 1e-9]
    assert rows[0]["status"] == "complete" and rows[1] in stopped, [
        (r["hyperparameters"], r["history"]) for r in rows
    ]
    for r in stopped:  # stopped at an ASHA rung, yet an ordinary run directory with its checkpoint
        assert r["steps"] < 8192 and (Path(r["run_dirs"][0]) / "checkpoint.json").is_file()
    assert 0 < report["asha_saved_fraction"] < 1
    assert (out / "sweep.md").read_text().count("|") > 20 and (out / "sweep.png").stat().st_size > 10_000

    best = Path(report["best"]["run_dir"])
    assert report["best"]["final_eval"] == max(r["final_eval"] for r in rows)
    art = tmp_path / "art"
    proc = rl2edge(
        "export", best, "--quantize", "fp32", "--out", art, "--eval-episodes", "2", "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = rl2edge("evaluate", art, "--env", "CartPole-v1", "--episodes", "2", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout.strip().splitlines()[-1])["mean_return"] > 0


def test_a_trials_seeds_share_the_cpus_of_a_cluster_smaller_than_them() -> None:
    from rl2edge.errors import ConfigError
    from rl2edge.train.distributed.sweep import cpus_per_seed

    assert cpus_per_seed(16, 3) == 1.0 and cpus_per_seed(3, 3) == 1.0
    assert cpus_per_seed(2, 3) == pytest.approx(0.66) and 3 * cpus_per_seed(2, 3) <= 2
    assert cpus_per_seed(1, 7) == pytest.approx(0.14) and 7 * cpus_per_seed(1, 7) <= 1
    with pytest.raises(ConfigError, match="offers 0 CPUs"):
        cpus_per_seed(0, 2)


@pytest.mark.integration
def test_each_configuration_trains_on_every_seed(tmp_path: Path) -> None:
    # --seeds in a sweep: every trial trains each seed (the first in the trial's actor, the others in
    # child actors of its placement group) and reports their mean; each seed is a run directory. Three
    # seeds, as docs/ray.md's sweep has: on a 2-core machine (CI) a trial used to ask Ray for 3 CPUs and
    # wait forever; its seeds now share the 2 CPUs. The env is Gymnasium's `module:Env-v0` form, an id
    # registered when the module is imported, which each Ray worker does again.
    out = tmp_path / "sweep"
    text = CARTPOLE_SPACE.replace("n_timesteps: 8192", "n_timesteps: 2048").replace(
        "eval_freq: 2048", "eval_freq: 1024"
    )
    proc = rl2edge(
        "tune", "--env", "testkit.registered_envs:RegCartPole-v0", "--space", _space_file(tmp_path, text),
        "--trials", "2", "--seeds", "0,1,2", "--out", out, "--no-progress",
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1])},  # testkit, as a user's own module
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "sweep.json").read_text())
    for row in report["trials_table"]:
        dirs = [Path(d) for d in row["run_dirs"]]
        assert [d.name for d in dirs] == ["s0", "s1", "s2"]
        assert all((d / "checkpoint.json").is_file() for d in dirs)
        finals = [json.loads((d / "summary.json").read_text())["final_eval"]["mean_return"] for d in dirs]
        assert row["final_eval"] == pytest.approx(sum(finals) / 3)
        ckpts = [json.loads((d / "checkpoint.json").read_text()) for d in dirs]
        assert [c["seed"] for c in ckpts] == [0, 1, 2]
        assert {c["env_id"] for c in ckpts} == {"testkit.registered_envs:RegCartPole-v0"}


_RAY_WORKER_LINE = re.compile(r"\((\w+) pid=\d+(, ip=[\d.]+)?\)")


@pytest.mark.integration
def test_resume_continues_an_interrupted_sweep(tmp_path: Path) -> None:
    import signal
    import subprocess

    from testkit.cli import EXE

    out = tmp_path / "sweep"
    args = [
        "tune",
        "--env",
        "CartPole-v1",
        "--space",
        str(_space_file(tmp_path)),
        "--trials",
        "4",
        "--out",
        str(out),
    ]
    proc = rl2edge(*args, "--resume")
    assert_clean_failure(proc, "no sweep to continue")
    # Ctrl-C once the first trial has finished: Tune saves its state, the unfinished trials are named
    sweep = subprocess.Popen(
        [EXE, *args, "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240
    while not (out / "trials").is_dir() or not any((out / "trials").iterdir()):
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.2)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 130, err[-3000:]
    # Ray forwards its workers' stderr prefixed "(SweepTrial pid=N)": a trial actor that ray.shutdown's SIGTERM
    # meets inside an actor handle's __del__ prints Ray's own SystemExit traceback there (1 run in CI). The
    # driver's own output must carry no traceback.
    driver = "\n".join(line for line in err.splitlines() if not _RAY_WORKER_LINE.search(line))
    assert "--resume" in driver and "Traceback" not in driver, driver[-3000:]
    first = json.loads((out / "sweep.json").read_text())
    assert first["status"]["interrupted"] >= 1
    proc = rl2edge(*args, "--resume", "--no-progress")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "sweep.json").read_text())
    assert report["resumed"] and len(report["trials_table"]) == 4 and report["status"]["interrupted"] == 0
    assert report["status"]["complete"] + report["status"]["stopped early"] == 4
    for row in report["trials_table"]:
        assert (Path(row["run_dirs"][0]) / "checkpoint.json").is_file()


@pytest.mark.integration
def test_seeds_give_exactly_the_checkpoints_of_single_runs(tmp_path: Path) -> None:
    from rl2edge.train.algos import build_config, train

    out = tmp_path / "seeds"
    proc = rl2edge(
        "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "2048", "--seeds", "0,1",
        "--device", "cpu", "--out", out, "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "seeds.json").read_text())
    assert [s["seed"] for s in summary["seeds"]] == [0, 1]
    assert summary["final_eval_across_seeds"]["min"] <= summary["final_eval_across_seeds"]["max"]
    for seed in (0, 1):
        single = tmp_path / f"single{seed}"
        cfg = build_config("CartPole-v1", None, {"n_timesteps": 2048}, algo="ppo")
        train("torch", "CartPole-v1", cfg, seed, single, device="cpu", progress=False)
        assert (out / f"s{seed}" / "policy.safetensors").read_bytes() == (
            single / "policy.safetensors"
        ).read_bytes()
        assert (out / f"s{seed}" / "checkpoint.json").read_text() == (single / "checkpoint.json").read_text()
    # different seeds, different runs
    assert (out / "s0" / "policy.safetensors").read_bytes() != (
        out / "s1" / "policy.safetensors"
    ).read_bytes()
    # a seed's run of more threads than any node has: refused, not queued forever (the local Ray counts
    # this machine's CPUs, or its container's quota); 512 is within --threads' bound of 1024
    proc = rl2edge(
        "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "512", "--seeds", "0,1",
        "--threads", "512", "--out", tmp_path / "too_many",
    )  # fmt: skip
    assert_clean_failure(
        proc, "--threads 512: the largest node of this Ray cluster has", "choose fewer threads"
    )


# It once exited 1 with nothing on stderr (in 1 of 5 runs here): Ray 2.60's driver aborted on ray.cancel of
# the second seed's task, just then being handed to a worker (train.distributed.cluster.tasks_end_with_session).
@pytest.mark.integration
def test_seeds_interrupted_keep_the_finished_runs_and_name_the_others(tmp_path: Path) -> None:
    """SIGTERM (a service manager's stop; ray.init installs its own handler for it, which exited 15 with no
    report) after the first seed finished: that seed's whole run stays, seeds.json lists it
    and names the unfinished one, the message says so (not "nothing was written"), exit 143, and the
    stopped seed removes its temporary folder. Each seed takes every CPU, so the second waits for the
    first and is still training when the signal comes."""
    import glob
    import os
    import signal
    import subprocess

    from ray._private.utils import get_num_cpus

    from testkit.cli import EXE

    tmp = tempfile.gettempdir()
    leftovers = lambda: set(  # noqa: E731  a seed's folder, or the folder the CLI's seeds train in
        glob.glob(os.path.join(tmp, "rl2edge-s1-*")) + glob.glob(os.path.join(tmp, "rl2edge-seeds-*"))
    )
    before = leftovers()
    out = tmp_path / "seeds"
    cpus = int(get_num_cpus())  # what the local Ray will count (cgroup quotas, cpusets)
    proc = subprocess.Popen(
        [EXE, "train", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "4096", "--seeds", "0,1",
         "--threads", str(cpus), "--device", "cpu", "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not (out / "s0" / "checkpoint.json").is_file():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 143, err[-3000:]
    said = f"interrupted by SIGTERM; kept s0 in {out} (seeds.json lists them); not finished: s1"
    assert said in err, err[-3000:]
    assert "nothing was written" not in err and "Traceback" not in err
    summary = json.loads((out / "seeds.json").read_text())
    assert [s["seed"] for s in summary["seeds"]] == [0] and summary["interrupted"] == [1]
    assert "Interrupted before they finished: s1." in (out / "seeds.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["s0", "seeds.json", "seeds.md"]
    # the command removes the folder its seeds trained in once the Ray session has ended (a stopped task was
    # killed before its own cleanup in two runs on a loaded 2-core machine); the wait covers a worker Ray
    # has not reaped yet
    deadline = time.monotonic() + 15
    while leftovers() != before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers() == before
    assert {"checkpoint.json", "policy.safetensors", "summary.json"} <= {
        p.name for p in (out / "s0").iterdir()
    }


ROLLOUT_CASES = [
    ("ppo", "torch", "CartPole-v1", {"n_envs": 4, "n_steps": 64}),
    ("a2c", "tf", "Pendulum-v1", {"n_envs": 3, "n_steps": 16}),  # uneven shares: 2 + 1 envs
    # some envs truncated at a step, not all: the bootstrap values' rows (2 + 1 envs)
    ("ppo", "torch", "testkit.short_envs:ShortCartPole", {"n_envs": 3, "n_steps": 32}),
    # a camera key: the workers run the Nature-CNN in numpy (train.core.numpy_encoder), 2 + 1 envs
    ("ppo", "torch", "testkit.dict_envs:CameraCartPole", {"n_envs": 3, "n_steps": 32}),
]


def _rollout_pair(tmp_path: Path, algo: str, framework: str, env_id: str, extra: dict) -> tuple[Path, Path]:
    from rl2edge.train.algos import build_config, train

    over = {"n_timesteps": 2048, "eval_freq": 1024, "eval_episodes": 2, "norm_obs_update": "rollout", **extra}
    single, dist = tmp_path / "single", tmp_path / "dist"
    train(
        framework,
        env_id,
        build_config(env_id, None, over, algo=algo),
        0,
        single,
        device="cpu",
        progress=False,
    )
    train(framework, env_id, build_config(env_id, None, over, algo=algo), 0, dist, device="cpu", progress=False,
          rollout_workers=2)  # fmt: skip
    return single, dist


@pytest.mark.integration
@pytest.mark.parametrize("algo, framework, env_id, extra", ROLLOUT_CASES)
def test_rollout_workers_give_the_single_process_checkpoint(
    tmp_path: Path, algo: str, framework: str, env_id: str, extra: dict
) -> None:
    from rl2edge.train.distributed.cluster import ray_session

    with ray_session(num_cpus=2):
        single, dist = _rollout_pair(tmp_path, algo, framework, env_id, extra)
    assert_same_weights(single, dist)
    a, b = (json.loads((d / "summary.json").read_text()) for d in (single, dist))
    assert a["final_eval"]["returns"] == b["final_eval"]["returns"]
    # the same statistics, folded into the exported graph
    ca, cb = (json.loads((d / "checkpoint.json").read_text()) for d in (single, dist))
    assert ca["normalization"] == cb["normalization"]


def test_rollout_workers_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    proc = rl2edge(
        "train", "--algo", "sac", "--env", "Pendulum-v1", "--rollout-workers", "2", "--out", tmp_path / "r"
    )
    assert_clean_failure(proc, "--rollout-workers spreads on-policy rollouts: ppo or a2c only")
    # one truth about the recurrent algorithms: the refusal, the help and docs/algorithms.md agree
    proc = rl2edge("train", "--algo", "ppo_lstm", "--env", "CartPole-v1", "--rollout-workers", "2")
    assert_clean_failure(proc, "ppo_lstm collects its rollouts in one process", "use it with ppo or a2c")
    helptext = " ".join(rl2edge("train", "--help").stdout.split())
    assert "--rollout-workers N PPO/A2C (not the recurrent ones)" in helptext and "LSTM" not in helptext
    doc = (Path(__file__).parents[1] / "docs" / "algorithms.md").read_text()
    assert "Not built yet: `--rollout-workers` (a recurrent run collects in one process)" in doc
    proc = rl2edge(
        "train", "--env", "CartPole-v1", "--rollout-workers", "9", "--steps", "512", "--out", tmp_path / "r"
    )
    assert_clean_failure(proc, "more than the 8 envs")


# ------------------------------------------------------------------------------ two nodes on this machine
@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def _sweep(tmp_path: Path, trials: int, steps: int) -> tuple[object, Path]:
    from rl2edge.train.distributed.search_space import load_search_space
    from rl2edge.train.distributed.sweep import SweepSpec

    text = CARTPOLE_SPACE.replace("n_timesteps: 8192", f"n_timesteps: {steps}")
    space = load_search_space(_space_file(tmp_path, text), "ppo", "CartPole-v1")
    return SweepSpec("ppo", "torch", "CartPole-v1", space, trials=trials), tmp_path / "sweep"


@pytest.mark.integration
def test_two_nodes_trials_land_on_both_and_rollout_workers_match(two_nodes, tmp_path: Path) -> None:
    from rl2edge.train.distributed.sweep import run_sweep

    spec, out = _sweep(tmp_path, trials=4, steps=8192)
    report = run_sweep(spec, out, progress=False)
    nodes = {r.node_id for r in _rows(report)}
    assert len(nodes) == 2, nodes
    # PPO with two rollout workers, one per node (one CPU each), against one process
    single, dist = _rollout_pair(tmp_path, *ROLLOUT_CASES[0])
    assert_same_weights(single, dist)


@pytest.mark.integration
def test_a_lost_node_mid_sweep_does_not_lose_the_sweep(two_nodes, tmp_path: Path) -> None:
    from rl2edge.train.distributed.sweep import run_sweep

    cluster, worker = two_nodes
    spec, out = _sweep(tmp_path, trials=3, steps=16384)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(report=run_sweep(spec, out, progress=False)))
    thread.start()
    # Both CPUs taken means a trial holds the worker node's; let it train a little, then take the node away.
    deadline = time.monotonic() + 120
    while ray.available_resources().get("CPU", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)
    cluster.remove_node(worker)
    thread.join(timeout=600)
    assert not thread.is_alive()
    report = result["report"]
    rows = report["trials_table"]
    print("retried:", report["retried_trials"], [(r["trial_id"], r["status"], r["steps"]) for r in rows])
    assert len(rows) == 3
    # the lost trial was started over on the head node, or (retries spent) marked in the table
    assert report["retried_trials"] or any(r["status"] == "error" for r in rows), report
    assert all(r["status"] in ("complete", "stopped early", "error") for r in rows)
    assert report["best"] is not None and (Path(report["best"]["run_dir"]) / "checkpoint.json").is_file()


def _rows(report: dict) -> list:
    from types import SimpleNamespace

    return [SimpleNamespace(**r) for r in report["trials_table"]]


@pytest.mark.integration
def test_tune_config_reaches_every_trial(tmp_path: Path) -> None:
    """tune --config FILE: hyperparameters under the space's draws, in every trial's checkpoint."""
    (tmp_path / "hp.yml").write_text("gamma: 0.97\nn_epochs: 3\n")
    space = "fixed: {n_timesteps: 1024, eval_freq: 1024, eval_episodes: 2}\nspace:\n  gae_lambda: {uniform: [0.8, 0.9]}\n"
    out = tmp_path / "sweep"
    proc = rl2edge(
        "tune", "--env", "CartPole-v1", "--space", _space_file(tmp_path, space), "--config", tmp_path / "hp.yml",
        "--trials", "2", "--max-concurrent", "1", "--out", out, "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in json.loads((out / "sweep.json").read_text())["trials_table"]:
        hp = json.loads((Path(row["run_dirs"][0]) / "checkpoint.json").read_text())["hyperparameters"]
        assert (hp["gamma"], hp["n_epochs"]) == (0.97, 3) and 0.8 <= hp["gae_lambda"] <= 0.9
