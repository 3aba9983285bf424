"""The dependency direction of docs/architecture.md, checked in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SUBPACKAGES = ("cli", "train", "export", "runtime", "plc_bridge")


def _package(module: str) -> str:
    """rl2edge.train.core.config -> train; numpy.linalg -> numpy; rl2edge.specs -> rl2edge."""
    parts = module.split(".")
    return parts[1] if parts[0] == "rl2edge" and len(parts) > 1 and parts[1] in SUBPACKAGES else parts[0]


def loaded_after(statement: str) -> set[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return {_package(m) for m in json.loads(out.strip().splitlines()[-1])}


@pytest.mark.parametrize(
    ("statement", "forbidden"),
    [
        (
            "import rl2edge.runtime; from rl2edge.runtime import Policy",
            {"torch", "tensorflow", "export", "train", "gymnasium"},
        ),
        (
            "import rl2edge.plc_bridge.loop, rl2edge.plc_bridge.client, rl2edge.plc_bridge.security",
            {"torch", "tensorflow", "export", "train"},
        ),
        ("from rl2edge.plc_bridge.sim import PlcSim", {"torch", "tensorflow", "export"}),
        (
            "import rl2edge.train.core.config, rl2edge.train.core.rollout, rl2edge.train.core.evaluation, "
            "rl2edge.train.core.metrics",
            {"torch", "tensorflow", "export", "runtime"},
        ),
        ("import rl2edge.train.torch_backend.ppo", {"tensorflow", "export", "runtime"}),
        (  # a Ray rollout worker acts with numpy: no framework in the actor
            "import rl2edge.train.distributed.rollout_workers, rl2edge.specs",
            {"torch", "tensorflow", "ray", "export", "runtime"},
        ),
        ("import rl2edge.cli.app", {"torch", "tensorflow", "train", "export", "runtime", "numpy"}),
        (  # every command's parser, as `rl2edge serve` builds it on the device: nothing outside [edge]
            "from rl2edge.cli.app import build_parser; build_parser()",
            {"torch", "tensorflow", "threadpoolctl", "gymnasium", "ray", "onnx", "stable_baselines3", "tqdm"},
        ),
        (  # the algorithm table and every config class: the CLI's choices, no framework
            "import rl2edge.train.algos as a; [r.config_class() for r in a.ALGOS.values()]",
            {"torch", "tensorflow", "export", "runtime"},
        ),
        (  # the TF export route: the graph's names, heads and checks are framework-free
            "import rl2edge.export.pipeline, rl2edge.export.tf_graph, rl2edge.export.sources.checkpoint_tf, "
            "rl2edge.export.sources.checkpoint, rl2edge.export.graph_spec, "
            "rl2edge.export.noise_verify",
            {"torch"},
        ),
    ],
)
def test_import_loads_only_what_it_may(statement: str, forbidden: set[str]) -> None:
    assert not loaded_after(statement) & forbidden


def test_runtime_policy_runs_without_torch_or_tensorflow(cartpole_all) -> None:
    _, root = cartpole_all
    loaded = loaded_after(
        f"from rl2edge.runtime import Policy\np = Policy.load({str(root / 'int8')!r})\np.predict([0.0, 0.0, 0.0, 0.0])"
    )
    assert not loaded & {"torch", "tensorflow"}
    assert "ai_edge_litert" in loaded


def _modules() -> list[str]:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = []
    for pkg in ("rl2edge", *SUBPACKAGES):
        for f in sorted((root / pkg).rglob("*.py")):
            if f.stem == "__main__":  # runs the command when imported
                continue
            parts = f.relative_to(root).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            names.append(".".join(parts if pkg == "rl2edge" else ("rl2edge", *parts)))
    return names


@pytest.mark.integration  # 2 x 11 s: the integration tier, which CI runs too (make test stays under 15 min)
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


def test_one_import_style_everywhere() -> None:
    """The four packages are installed as rl2edge.train, rl2edge.export, rl2edge.runtime and
    rl2edge.plc_bridge (no collision with a user's own `train`); from a source checkout the bare names
    would import a second copy of each module, so no file may use them."""
    import re

    root = Path(__file__).resolve().parents[1]
    bare = re.compile(r"^\s*(from|import) (cli|train|export|runtime|plc_bridge)\b", re.M)
    offenders = [
        f"{f.relative_to(root)}:{text[: m.start()].count(chr(10)) + 1}"
        for d in ("rl2edge", *SUBPACKAGES, "tests", "benchmarks", "scripts")
        for f in sorted((root / d).rglob("*.py"))
        for text in [f.read_text()]
        for m in bare.finditer(text)
    ]
    assert offenders == []


def test_the_wheel_lists_every_package() -> None:
    """pyproject's package list is written by hand: a new subpackage left out of it imports from a source
    checkout (the editable install finds it) and is missing from the wheel a workstation or device gets."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"rl2edge"}
    for top in SUBPACKAGES:
        for init in (root / top).rglob("__init__.py"):
            found.add(".".join(("rl2edge", *init.parent.relative_to(root).parts)))
    assert found == listed


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, lazy ones inside functions too."""
    import ast

    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out += [(node.lineno, node.module)]
    return out


def test_the_cli_is_on_top_and_rl2edge_holds_only_leaves() -> None:
    """docs/architecture.md's floors: cli/ imports every package and none imports it (a process boundary
    such as `python -m rl2edge.cli` is not an import); rl2edge/ itself holds the leaf modules (specs,
    errors, fileio, ...), which import none of the five packages."""
    root = Path(__file__).resolve().parents[1]
    upward = [
        f"{f.relative_to(root)}:{line} imports {name}"
        for top in ("rl2edge", "train", "export", "runtime", "plc_bridge")
        for f in sorted((root / top).rglob("*.py"))
        for line, name in _imported(f)
        if name == "rl2edge.cli"
        or name.startswith("rl2edge.cli.")
        or (top == "rl2edge" and name.split(".")[:2] in [["rl2edge", p] for p in SUBPACKAGES])
    ]
    assert upward == []
    assert not (root / "rl2edge" / "cli.py").exists() and not (root / "rl2edge" / "commands").exists()
