"""The import graph read from the source, every import counted: module-level, inside functions (lazy) and
under `if TYPE_CHECKING:`. A cycle that a lazy import hides still couples two modules both ways; the
fresh-interpreter checks of tests/test_imports.py only see what fails at import time."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("train", "export", "runtime", "plc_bridge")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] in ("rl2edge", "tests", "benchmarks") else ("rl2edge", *parts))


@cache
def production_modules() -> dict[str, Path]:
    files = [f for pkg in ("rl2edge", *SUBPACKAGES) for f in sorted((ROOT / pkg).rglob("*.py"))]
    return {_module_name(f): f for f in files}


def imported_names(path: Path, module: str) -> Iterator[tuple[str, int]]:
    """Every module name an import statement in `path` may load, with its line (relative imports resolved;
    `from a import b` yields a.b as well as a, since b may be a submodule)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


@cache
def graph() -> dict[str, dict[str, int]]:
    """module -> {production module it imports: line}. An import of a.b.c counts as one of a.b.c only
    (its packages' __init__ files are checked as modules of their own)."""
    mods = production_modules()
    edges: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        out: dict[str, int] = {}
        for target, line in imported_names(path, name):
            if target in mods and target != name:
                out.setdefault(target, line)
        edges[name] = out
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    """The graph builder itself: a function-level import and one under TYPE_CHECKING both count."""
    f = tmp_path / "m.py"
    f.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rl2edge.runtime import policy\n"
        "def g():\n    import rl2edge.plc_bridge.loop\n    from . import sibling\n"
    )
    names = {n for n, _ in imported_names(f, "rl2edge.export.m")}
    assert {"rl2edge.runtime.policy", "rl2edge.plc_bridge.loop", "rl2edge.export.sibling"} <= names
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_no_cycle_in_the_production_code() -> None:
    edges = graph()
    found = cycles(edges)

    def describe(component: list[str]) -> str:
        links = [f"{a} -> {b} (line {edges[a][b]})" for a in component for b in edges[a] if b in component]
        return "; ".join(links)

    assert found == [], "import cycles: " + " | ".join(describe(c) for c in found)


def _imports_from(prefix: str) -> Iterator[tuple[str, str, int]]:
    for name, targets in graph().items():
        if name == prefix or name.startswith(prefix + "."):
            for target, line in targets.items():
                yield name, target, line


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


# rl2edge's leaf modules, which every package may import.
LEAF = (
    "rl2edge.errors",
    "rl2edge.fileio",
    "rl2edge.specs",
    "rl2edge.interrupts",
    "rl2edge.tables",
    "rl2edge.bounded",
    "rl2edge.ports",
)


# Stated exceptions: plc-sim is the workstation's stand-in for the plant (not installed on a device's path:
# `serve` never imports it) and makes the env as training does.
EXCEPTIONS = {("rl2edge.plc_bridge.sim", "rl2edge.train.core.envs")}


@pytest.mark.parametrize(
    ("package", "may_import"),
    [
        ("rl2edge.runtime", ("rl2edge.runtime", *LEAF)),
        ("rl2edge.plc_bridge", ("rl2edge.plc_bridge", "rl2edge.runtime", *LEAF)),
        ("rl2edge.train.core", ("rl2edge.train.core", *LEAF)),
        ("rl2edge.train", ("rl2edge.train", *LEAF)),
        ("rl2edge.export", ("rl2edge.export", "rl2edge.train", "rl2edge.runtime", *LEAF)),
    ],
)
def test_layers_import_only_downwards(package: str, may_import: tuple[str, ...]) -> None:
    """docs/architecture.md's dependency direction, lazy imports included: the device packages never reach
    train/ or export/; train/core never reaches train/distributed or a backend; train never reaches
    export/."""
    wrong = [
        f"{name}:{line} imports {target}"
        for name, target, line in _imports_from(package)
        if target.startswith("rl2edge")
        and target != "rl2edge"
        and not _within(target, may_import)
        and (name, target) not in EXCEPTIONS
    ]
    assert wrong == []


def _external_imports(directory: str) -> Iterator[tuple[str, str, int]]:
    for f in sorted((ROOT / directory).rglob("*.py")):
        name = _module_name(f)
        for target, line in imported_names(f, name):
            yield f"{f.relative_to(ROOT)}", target, line


def test_benchmarks_import_nothing_from_tests() -> None:
    wrong = [
        f"{f}:{line} imports {t}"
        for f, t, line in _external_imports("benchmarks")
        if t.split(".")[0] == "tests"
    ]
    assert wrong == []


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in testkit/ (which the benchmarks use too), not in another test file:
    importing a test module runs its module code and couples two files."""
    wrong = [
        f"{f}:{line} imports {t}"
        for f, t, line in _external_imports("tests")
        if t.startswith("tests.test_") and f.startswith("tests/test_")
    ]
    assert wrong == []
