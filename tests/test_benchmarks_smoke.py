"""Each benchmark script runs end to end on tiny settings and writes its JSON, markdown and PNG.
These check that the scripts work, not the figures (those belong to the benchmark runs)."""

from __future__ import annotations

import json
from pathlib import Path


def test_loop_latency_benchmark_smoke(cartpole_all, tmp_path: Path) -> None:
    from benchmarks.loop_latency import main

    _, root = cartpole_all
    data = main(
        ["--artifact", str(root / "int8"), "--cycles", "15", "--period-ms", "10", "--out", str(tmp_path)]
    )
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"loop_latency.{ext}").stat().st_size > 0
    saved = json.loads((tmp_path / "loop_latency.json").read_text())
    assert set(saved["results"]) == {"none", "sign_and_encrypt"} and "machine" in saved
    for mode in data["results"].values():
        assert mode["serve_loop"]["cycles"] == 15 and mode["bare_read_write_ms"]["n"] == 15


def test_train_throughput_benchmark_smoke(tmp_path: Path) -> None:
    from benchmarks.train_throughput import main

    data = main(["--steps", "512", "--who", "torch,tf,sb3", "--out", str(tmp_path)])
    for ext in ("json", "md", "png"):
        assert (tmp_path / f"train_throughput.{ext}").stat().st_size > 0
    assert set(data["results"]) == {"torch", "tf", "sb3"}
    assert all(r["steps_per_s_median"] > 0 for r in data["results"].values())
    assert "SB3" in (tmp_path / "train_throughput.md").read_text()
