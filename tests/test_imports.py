"""The dependency direction of docs/architecture.md, checked in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def loaded_after(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("statement", "forbidden"),
    [
        (
            "import runtime; from runtime import Policy",
            {"torch", "tensorflow", "export", "train", "gymnasium"},
        ),
        (
            "import plc_bridge.loop, plc_bridge.client, plc_bridge.security",
            {"torch", "tensorflow", "export", "train"},
        ),
        ("import plc_bridge.sim; plc_bridge.sim.PlcSim", {"torch", "tensorflow", "export"}),
        (
            "import train.core.config, train.core.rollout, train.core.evaluation, train.core.metrics",
            {"torch", "tensorflow", "export", "runtime"},
        ),
        ("import train.torch_backend.ppo", {"tensorflow", "export", "runtime"}),
        ("import rl2edge.cli", {"torch", "tensorflow", "train", "export", "runtime", "numpy"}),
        (  # the algorithm table and every config class: the CLI's choices, no framework
            "import train.algos as a; [r.config_class() for r in a.ALGOS.values()]",
            {"torch", "tensorflow", "export", "runtime"},
        ),
        (  # the TF export route: the graph's names, heads and checks are framework-free
            "import export.pipeline, export.tf_source, export.graph_spec, export.noise_verify",
            {"torch"},
        ),
    ],
)
def test_import_loads_only_what_it_may(statement: str, forbidden: set[str]) -> None:
    assert not loaded_after(statement) & forbidden


def test_runtime_policy_runs_without_torch_or_tensorflow(cartpole_all) -> None:
    _, root = cartpole_all
    loaded = loaded_after(
        f"from runtime import Policy\np = Policy.load({str(root / 'int8')!r})\np.predict([0.0, 0.0, 0.0, 0.0])"
    )
    assert not loaded & {"torch", "tensorflow"}
    assert "ai_edge_litert" in loaded


def _modules() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = []
    for pkg in ("rl2edge", "runtime", "plc_bridge", "train", "export"):
        for f in sorted((root / pkg).rglob("*.py")):
            parts = f.relative_to(root).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("seed", [0, 1])
def test_no_import_cycle_whatever_the_order(seed: int) -> None:
    """Every module of the five packages, imported in a random order in one fresh interpreter: a cycle
    that lazy imports used to hide shows up as an ImportError for some order."""
    import random

    names = _modules()
    random.Random(seed).shuffle(names)
    code = "import importlib\nfor n in " + repr(names) + ":\n    importlib.import_module(n)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
