"""Each benchmark script runs end to end on tiny settings and writes its JSON, markdown and PNG.
These check that the scripts work, not the figures (those belong to the benchmark runs)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# The smokes check that each script works, not its figures, and most run two files at a time. The ones below
# stay serial: what they assert was counted against a clock (a loop's deadline misses, a PLC's recovery, a
# ratio of two timings), or they drive the real Mender client, which test_mender.py owns meanwhile.
timed = pytest.mark.serial("the script's loop is timed and the test asserts on what it counted meanwhile")
timing_ratio = pytest.mark.serial("the test asserts a ratio of two timings taken one after the other")
mender_client = pytest.mark.serial(
    "the real Mender client's files: one device per machine (tests/test_mender.py)"
)

# Each runs a benchmark script end to end (10-35 s): `make test-integration` and CI, not `make test`.
# The one left in `make test` needs only the runtime.
integration = pytest.mark.integration
# The smokes that train SB3 or sb3-contrib beside rl2edge (35-40 s each on CI's 2 cores): `make test-all`, not
# CI, whose 90 minutes the integration tier had outgrown; the scripts' own parts run in the other smokes.
slow_smoke = pytest.mark.slow


@timed
@integration
def test_loop_latency_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.loop_latency import main

    _, root = cartpole_all
    data = main(
        ["--artifact", str(root / "int8"), "--cycles", "15", "--period-ms", "10", "--out", str(tmp_path)]
    )
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"loop_latency.{ext}").stat().st_size > 0
    saved = json.loads((tmp_path / "loop_latency.json").read_text())
    assert set(saved["results"]) == {
        f"{server}/{mode}" for server in ("asyncua", "node-opcua") for mode in ("none", "sign_and_encrypt")
    }
    assert "machine" in saved
    for row in data["results"].values():
        for form in (
            "paced",
            "serve_spin0",
            "serve_spin",
            "serve_process",
        ):  # 5 interleaved blocks of 3 cycles
            assert row[form]["stats"]["n"] == 15 and row[form]["cpu_ms_per_cycle"] > 0
        assert row["serve_spin"]["deadline_misses"] == 0 and len(row["serve_spin"]["over_bare_paced"]) == 2
        assert row["bare_read_two_writes_ms"]["n"] == 15 and row["bare_read_one_write_ms"]["n"] == 15


@timing_ratio
@integration
def test_offpolicy_throughput_has_a_roofline(tmp_path: Path) -> None:
    from benchmarks.train_throughput import main

    data = main(["--algo", "dqn", "--steps", "1300", "--who", "torch,sb3", "--out", str(tmp_path)])
    roof = data["roofline"]
    results = data["results"]
    assert results["torch"]["matmul_library"] == "torch"
    assert 0 < results["torch"]["share_of_limit"] < 1 and 0 < results["sb3"]["share_of_limit"] < 1
    limit = roof["matmul_s_by_library"]
    assert roof["ceiling_vs_sb3"]["torch"] == pytest.approx(
        results["sb3"]["run_s_per_gradient_step"] / limit["torch"]
    )
    assert (
        roof["gradient_steps"] == 300 * 128 / 256
    )  # (steps - learning_starts) x gradient_steps / train_freq
    # the recorded matmuls are the step's whole dense work: DQN's formula (double Q: 5 passes) within 1%
    # (the formula counts the first layer's input gradient, which no step computes)
    assert roof["gflop_per_gradient_step"] == pytest.approx(roof["formula_gflop_per_gradient_step"], rel=0.01)
    for fw in ("torch", "tf"):
        fig = roof["by_framework"][fw]
        assert 0 < fig["narrow_step_s"] < fig["step_s"] and fig["matmul_s"] > 0
    assert set(limit) == set(roof["peak_gflops_by_library"]) == {"torch", "tensorflow"}
    assert "Roofline" in (tmp_path / "train_throughput_dqn.md").read_text()


@integration
def test_train_throughput_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.train_throughput import main

    data = main(["--steps", "512", "--who", "torch,tf,sb3", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"train_throughput.{ext}").stat().st_size > 0
    assert set(data["results"]) == {"torch", "tf", "sb3"}
    assert all(r["steps_per_s_median"] > 0 for r in data["results"].values())
    assert "SB3" in (tmp_path / "train_throughput.md").read_text()


@slow_smoke
@integration
@pytest.mark.parametrize(("algo", "who"), [("a2c", "torch,sb3"), ("rainbow", "sb3,torch-off,tf-on")])
def test_train_throughput_of_a2c_and_rainbow_next_to_sb3(algo: str, who: str, tmp_path: Path) -> None:
    from benchmarks.train_throughput import main

    data = main(["--algo", algo, "--steps", "1200", "--who", who, "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"train_throughput_{algo}.{ext}").stat().st_size > 0
    assert list(data["results"]) == who.split(",") and set(data["ratio_to_sb3"]) == set(who.split(","))
    md = (tmp_path / f"train_throughput_{algo}.md").read_text()
    assert ("Stable-Baselines3 A2C" if algo == "a2c" else "Stable-Baselines3 DQN (DQN preset)") in md


@integration
def test_latency_suite_smoke(tmp_path: Path) -> None:
    from benchmarks.latency import main

    data = main(["--suite", "--policies", "mlp64,dict4", "--calls", "20", "--out", str(tmp_path)])
    forms = {r["form"] for r in data["rows"]}
    assert {r["policy"] for r in data["rows"]} == {"MLP 64x64", "MLP 64x64, Dict of 4 keys"}
    assert {
        "torch eager",
        "torch no-grad",
        "ONNX Runtime",
        "TFLite int8 invoke",
        "TFLite fp16 predict",
    } <= forms
    assert {r["threads"] for r in data["rows"]} >= {1}
    assert data["derived"]["predict_overhead_us_1thread"]
    for ext in ("json", "md", "png"):
        # a choice of policies other than the default suite's writes files of its own
        assert (tmp_path / f"latency_mlp64_dict4.{ext}").stat().st_size > 0
    assert not (tmp_path / "latency.json").exists()


def test_latency_of_one_artifact_needs_only_the_runtime(cartpole_all, tmp_path: Path) -> None:
    import subprocess
    import sys

    _, root = cartpole_all
    code = (
        f"import sys; sys.argv = ['x', '--artifact', {str(root / 'int8')!r}, '--calls', '20', '--out', {str(tmp_path)!r}, "
        "'--name', 'latency_cp_int8']\n"
        "from benchmarks.latency import main; main()\n"
        "print('LOADED', sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    ).stdout
    assert "LOADED []" in out and "TFLite int8 predict" in (tmp_path / "latency_cp_int8.md").read_text()


@integration
def test_quantization_benchmark_smoke(cartpole_run: Path, tmp_path: Path) -> None:
    from benchmarks.quantization import main

    data = main(["--runs", str(cartpole_run), "--episodes", "1", "--out", str(tmp_path)])
    assert [f["mode"] for f in data["files"]] == ["fp32", "fp16", "dynamic", "int8"]
    assert (tmp_path / "quantization.png").stat().st_size > 0


@integration
def test_returns_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.returns import main

    data = main(["--cells", "dqn:CartPole-v1", "--frameworks", "tf", "--seeds", "0", "--steps", "400",
                 "--episodes", "1", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path)])  # fmt: skip
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"returns.{ext}").stat().st_size > 0
    (row,) = data["rows"]
    assert (row["algo"], row["framework"], row["zoo_return"], row["steps"]) == ("dqn", "tf", 500.0, 400)
    assert "500 (50k)" in (tmp_path / "returns.md").read_text()


@slow_smoke
@integration
def test_returns_camera_suite_smoke(tmp_path: Path) -> None:
    """The camera suite: its own config file, a camera key through the Nature-CNN, and the random policy's
    returns on the same seeds next to the table."""
    from benchmarks.returns import main

    data = main(["--suite", "camera", "--frameworks", "torch", "--seeds", "0", "--steps", "256",
                 "--episodes", "2", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path),
                 "--name", "returns_camera"])  # fmt: skip
    (row,) = data["rows"]
    assert (row["algo"], row["env_id"]) == ("ppo", "testkit.dict_envs:CameraCartPole")
    assert len(data["camera_references"]["random (uniform actions)"]) == 2
    assert (
        "CameraCartPole references on the same seeds (0 to 1)" in (tmp_path / "returns_camera.md").read_text()
    )


@slow_smoke
@integration
def test_returns_memory_suite_smoke(tmp_path: Path) -> None:
    """The memory suite: ppo_lstm (an LSTM, and a GRU from its own config), a2c_lstm, plain PPO and PPO on a
    frame stack (its own config) as rows."""
    from benchmarks.returns import main

    data = main(["--suite", "memory", "--frameworks", "torch", "--seeds", "0", "--steps", "512",
                 "--episodes", "1", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path),
                 "--name", "returns_memory"])  # fmt: skip
    assert [r["algo"] for r in data["rows"]] == [
        "ppo_lstm",
        "ppo_lstm (gru)",
        "a2c_lstm",
        "ppo",
        "ppo (stack4)",
    ]
    assert {r["env_id"] for r in data["rows"]} == {"CartPoleNoVel-v1"}
    stack4 = json.loads(
        (tmp_path / "runs" / "CartPoleNoVel-v1_ppo_stack4_torch_s0_512" / "checkpoint.json").read_text()
    )
    assert stack4["network"]["frame_stack"] == 4
    gru = json.loads(
        (tmp_path / "runs" / "CartPoleNoVel-v1_ppo_lstm_gru_torch_s0_512" / "checkpoint.json").read_text()
    )
    assert gru["network"]["rnn"] == "gru"


@slow_smoke
@integration
def test_recurrent_returns_seed_by_seed_next_to_sb3_contrib(tmp_path: Path) -> None:
    from benchmarks.returns_recurrent import main

    argv = ["--seeds", "0", "--steps", "2048", "--episodes", "2", "--only", "ppo_lstm:torch,sb3"]
    data = main([*argv, "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"returns_recurrent.{ext}").stat().st_size > 0
    assert [r["contender"] for r in data["rows"]] == [
        "rl2edge ppo_lstm (torch), int8",
        "sb3-contrib RecurrentPPO (torch, fp32)",
    ]
    assert all(len(r["returns"]) == 1 and r["returns"][0] > 0 for r in data["rows"])


@slow_smoke
@integration
def test_recurrent_throughput_next_to_sb3_contrib(tmp_path: Path) -> None:
    from benchmarks.train_throughput import main

    data = main(["--algo", "ppo_lstm", "--env", "CartPoleNoVel-v1", "--steps", "512", "--who", "torch,sb3",
                 "--out", str(tmp_path)])  # fmt: skip
    assert set(data["ratio_to_sb3"]) == {"torch", "sb3"}
    assert "sb3-contrib RecurrentPPO" in (tmp_path / "train_throughput_ppo_lstm.md").read_text()


@timed
@integration
def test_plc_restart_soak_smoke(cartpole_all, tmp_path: Path) -> None:
    """Half a minute with the PLC killed every 6 s: the script restarts it, sees serve recover, and
    writes its files (the must-show figures come from the 60-minute run)."""
    from benchmarks.plc_restart_soak import main

    _, root = cartpole_all
    args = ["--artifact", str(root / "int8"), "--minutes", "0.5", "--restart-every-min", "0.1"]
    data = main([*args, "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"plc_restart_soak.{ext}").stat().st_size > 0
    assert len(data["restarts"]) >= 2 and all(r["recovery_s"] is not None for r in data["restarts"])
    assert data["serve_exit_code"] == 0 and data["max_plc_sessions"] == 1


@timed
@integration
def test_policy_swap_benchmark_smoke(cartpole_all, cartpole_flipped, pendulum_fp32, tmp_path: Path) -> None:
    """Two swaps and the three refusals on a quiet machine: the script drives serve --watch through them
    and writes its files (the must-show figures come from the 10-swap run with and without load)."""
    from benchmarks.policy_swap import main

    _, root = cartpole_all
    args = ["--a", str(root / "fp32"), "--b", str(root / "fp16"), "--other", str(pendulum_fp32[1] / "")]
    args += ["--flipped", str(cartpole_flipped), "--swaps", "2", "--conditions", "quiet", "--settle-s", "0.3"]
    data = main([*args, "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"policy_swap.{ext}").stat().st_size > 0
    (row,) = data["conditions"]
    assert row["updates"]["accepted"] == 2 and row["updates"]["refused"] == 3 and row["serve_exit_code"] == 0


@integration
def test_model_process_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.model_process import main

    data = main(
        ["--artifact", str(cartpole_all[1] / "int8"), "--calls", "100", "--no-cnn", "--out", str(tmp_path)]
    )
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"model_process.{ext}").stat().st_size > 0
    assert {r["form"] for r in data["rows"]} == {
        "in-process predict",
        "model-process predict, child asleep",
        "model-process predict after a warm-up",
    }
    assert len(data["added_us"]) == 2


@integration
def test_metrics_flood_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.metrics_flood import main

    data = main(
        ["--artifact", str(cartpole_all[1] / "int8"), "--seconds", "2", "--connections", "200",
         "--out", str(tmp_path)]
    )  # fmt: skip
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"metrics_flood.{ext}").stat().st_size > 0
    assert [p["cycles"] > 0 for p in data["phases"]] == [True, True, True]
    assert data["log"]["tracebacks"] == 0 and data["serve_exit"] == 0


@timed
@integration
def test_loop_under_load_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.loop_under_load import main

    _, root = cartpole_all
    data = main(["--artifact", str(root / "int8"), "--cycles", "40", "--periods", "20", "--loads", "1",
                 "--record-arm", "--out", str(tmp_path)])  # fmt: skip
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"loop_under_load.{ext}").stat().st_size > 0
    rows = data["rows"]
    assert [(r["load"], r["realtime"], r["recording"], r["cycles"]) for r in rows[:2]] == [
        ("1", False, False, 40),
        ("1", False, True, 40),
    ]
    assert rows[0]["scheduler"] == "SCHED_OTHER"
    if len(rows) == 4:  # a machine where the process may use SCHED_FIFO
        assert [(r["realtime"], r["recording"], r["cycles"]) for r in rows[2:]] == [
            (True, False, 40),
            (True, True, 40),
        ]
        assert rows[2]["scheduler"] == "SCHED_FIFO 50 (--realtime)"
    assert "| --record |" in (tmp_path / "loop_under_load.md").read_text()


@integration
def test_fault_responses_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.fault_responses import main

    _, root = cartpole_all
    data = main(["--artifact", str(root / "int8"), "--episodes", "1", "--rates", "0.1", "--classes",
                 "deadline_miss", "--period-ms", "20", "--out", str(tmp_path)])  # fmt: skip
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"fault_responses.{ext}").stat().st_size > 0
    # a Discrete action: no ramp; the baseline first
    assert [(r["fault"], r["response"]) for r in data["rows"]] == [
        ("none", "-"),
        ("deadline_miss", "safe"),
        ("deadline_miss", "hold"),
    ]
    assert data["rows"][2]["held"] > 0 and data["rows"][1]["held"] == 0


@integration
def test_micro_costs_smoke(tmp_path: Path) -> None:
    from benchmarks.micro_costs import main

    data = main(["--repeats", "1", "--scale", "0.01", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"micro_costs.{ext}").stat().st_size > 0
    figures = data["figures"]
    assert figures["compile_s"] > 0 and all(v > 0 for k, v in figures.items() if k.endswith("_us"))
    assert {"ppo_step_written_out_us", "ppo_step_autograd_us", "ppo_step_compiled_us"} <= set(figures)


@integration
def test_trained_elsewhere_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.trained_elsewhere import main

    data = main(["--iterations", "1", "--quick", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"trained_elsewhere.{ext}").stat().st_size > 0
    assert list(data["results"]) == ["rsl-rl MLP policy.onnx"]
    assert all(r["fp32"]["max_abs_error"] <= 1e-4 for r in data["results"].values())


@integration
def test_replay_memory_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.replay_memory import main

    data = main(["--transitions", "600", "--batch", "32", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"replay_memory.{ext}").stat().st_size > 0
    once, uint8, float32 = data["rows"]
    # the arrays' own size, exactly: a byte per pixel against four, the float32 value alike; once: one
    # observation per slot of a ring of the transitions plus one add's (100 envs)
    assert once["observation_bytes_stored"] == (600 + 100) * (84 * 84 * 3 + 4)
    assert uint8["observation_bytes_stored"] == 2 * 600 * (84 * 84 * 3 + 4)
    assert float32["observation_bytes_stored"] == 2 * 600 * (84 * 84 * 3 + 1) * 4


@slow_smoke
@integration
def test_her_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.her import main

    data = main(["--steps", "300", "--seeds", "0", "--episodes", "2", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"her.{ext}").stat().st_size > 0
    assert [r["who"] for r in data["rows"]] == [
        "rl2edge SAC + HER (int8)", "rl2edge SAC, plain (int8)", "SB3 SAC + HerReplayBuffer"
    ]  # fmt: skip
    assert all(len(r["success"]) == 1 and 0.0 <= r["mean"] <= 1.0 for r in data["rows"])


@slow_smoke
@integration
def test_sac_vs_sb3_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.sac_vs_sb3 import main

    data = main(["--steps", "300", "--seeds", "0", "--episodes", "1", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"sac_vs_sb3.{ext}").stat().st_size > 0
    assert [r["who"] for r in data["rows"]] == ["rl2edge SAC (torch, int8 file)", "SB3 SAC (predict)"]
    assert all(len(r["per_seed"]) == 1 and r["mean"] == r["mean"] for r in data["rows"])  # not NaN


@integration
def test_env_matrix_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.env_matrix import main

    data = main(["--cells", "valves-ppo,pendulum-dqn", "--episodes", "2", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"env_matrix.{ext}").stat().st_size > 0
    rows = {r["cell"]: r for r in data["rows"]}
    works, refused = rows["valves-ppo"], rows["pendulum-dqn"]
    assert works["outcome"] == "works" and works["served_equals_evaluate"], works
    assert refused["outcome"] == "refused" and "DQN needs a Discrete action space" in refused["reason"]


@mender_client
@integration
def test_fleet_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    """One new policy and the way back through the real Mender client: the script times both and writes its
    files (the committed figures come from three new policies at serve's default watch and shadow run)."""
    from testkit.mender import missing

    if missing():
        pytest.skip(missing())
    from benchmarks.fleet import main

    _, root = cartpole_all
    args = ["--first", str(root / "fp32"), "--updates", str(root / "int8"), "--watch-interval", "0.2"]
    data = main([*args, "--shadow-cycles", "10", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"fleet.{ext}").stat().st_size > 0
    new, back = data["updates"]
    assert not new["known_good"] and new["shadow_cycles"] == 10 and back["known_good"]
    for u in (new, back):  # a known-good policy may take over before the client has written its database
        assert 0 < u["install_s"] < u["committed_s"] and 0 < u["answering_s"] < u["committed_s"]
    assert data["serve"]["invalid"] == 0 and data["serve"]["inference_errors"] == 0


@integration
def test_train_scaling_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.train_scaling import JOBS, main

    data = main(["--algos", "ppo", "--steps", "512", "--seeds", "0", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"train_scaling.{ext}").stat().st_size > 0
    assert [(r["job"], r["world_size"], r["steps"]) for r in data["runs"]] == [
        (JOBS[0], 1, 512), (JOBS[1], 2, 512), (JOBS[2], 2, 512)
    ]  # fmt: skip
    assert data["rows"][0]["ratio"] == 1.0 and all(r["mean"] > 0 for r in data["rows"])


@integration
def test_gpu_check_dry_mode_runs_its_own_commands(tmp_path: Path) -> None:
    """scripts/gpu_check.sh --device cpu: every command the GPU run would type, on tiny budgets, so that the
    script a GPU session runs cannot rot on the CPU-only CI."""
    import subprocess

    from benchmarks.gpu_check import cases

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [str(root / "scripts" / "gpu_check.sh"), "--device", "cpu", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((tmp_path / "gpu_check_dry.json").read_text())["rows"]
    assert [r["case"] for r in rows] == [c.name for c in cases()]
    ran = [r for r in rows if "skipped" not in r]
    assert [r["case"] for r in ran] == [c.name for c in cases() if c.on_device]
    assert all(r["device_used"] == "cpu" and r["steps_per_s"] > 0 for r in ran)
    assert next(r for r in ran if r["case"] == "ppo --nproc 2")["world_size"] == 2
    assert (tmp_path / "gpu_check_dry.md").stat().st_size > 0


@integration
def test_recorder_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.recorder import OFFSETS_STD, main

    art = cartpole_all[1] / "fp32"
    data = main(
        [
            "--artifact",
            str(art),
            "--cycles",
            "40",
            "--blocks",
            "2",
            "--clean-episodes",
            "3",
            "--out",
            str(tmp_path),
        ]
    )
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"recorder.{ext}").stat().st_size > 0
    for period in ("10", "20"):
        row = data["cost"][period]
        assert row["off"]["cycles"] == row["on"]["cycles"] == 40 and row["mb_per_hour"] > 0
    assert [r["offset_std"] for r in data["drift"]["shifted"]] == list(OFFSETS_STD)
    assert data["drift"]["unshifted"]["observations"] > 0
