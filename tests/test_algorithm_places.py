"""An algorithm is named in its row, its config, its agent modules and its preset, nowhere else
(docs/architecture.md, "Adding an algorithm"): everything else decides through the row. Read from the
source: identifiers and string constants count; prose does not (comments, docstrings, and the help,
description and epilog texts of the CLI, which may cite an example run or a measurement; a list of the
algorithms a flag serves is generated from the rows)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rl2edge.train.algos import ALGOS

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("rl2edge", "train", "export", "runtime", "plc_bridge")

# Modules that belong to the algorithms without being one row's: the table itself, and each backend's
# nets.py, where the agent modules' networks live (the recipe's step 3).
TABLE_AND_NETS = {"train/algos.py", "train/torch_backend/nets.py", "train/tf_backend/nets.py"}
# Names that are someone else's: Stable-Baselines3's model classes, which the SB3 import loads by name.
SB3_IMPORT = {"export/sources/sb3.py": {"ppo", "a2c", "sac", "td3", "dqn"}}
# Strings of the artifact format, kept as written: the manifest's formula of folded policy noise.
FORMAT_STRINGS = ("SAC: center + tanh(mean + exp(log_std) * noise) * half_range; ",)


def _module_file(dotted: str) -> str:
    """rl2edge.train.core.config:PPOConfig -> train/core/config.py."""
    parts = dotted.split(":")[0].split(".")
    parts = parts[1:] if parts[0] == "rl2edge" and len(parts) > 1 and parts[1] in PRODUCTION[1:] else parts
    return "/".join(parts) + ".py"


def own_places(name: str) -> set[str]:
    """The files allowed to name `name`: its config's and agents' modules, the modules mixed into its
    agents (named for an algorithm: sac_written_out.py, dqn_hooks.py), the table and the nets."""
    row = ALGOS[name]
    places = {_module_file(row.config), *(_module_file(a) for a in row.agents.values())} | TABLE_AND_NETS
    for other in ALGOS.values():  # an algorithm built on this one (ppo_lstm on ppo) names it in its places
        if other.name.startswith(f"{name}_"):
            places |= {_module_file(other.config), *(_module_file(a) for a in other.agents.values())}
    for f in (ROOT / "train").rglob("*.py"):
        stem = f.stem.split("_")[0]
        if stem in ALGOS:
            places.add(str(f.relative_to(ROOT)))
    return places


def words(text: str) -> set[str]:
    """The lower-case words of an identifier or string: SACConfig -> sac, config; td3_mlp -> td3, mlp."""
    out = set()
    for token in re.split(r"[^A-Za-z0-9]+", text):
        for w in re.findall(r"[A-Z0-9]+(?=[A-Z][a-z]|\b|$)|[A-Z]?[a-z0-9]+|[A-Z0-9]+", token):
            out.add(w.lower())
    return out


def named(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every identifier and string constant in `path`, docstrings excluded."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        for body in [node.body]
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    }
    # A bare string statement after an assignment documents it (attribute docstrings): prose too.
    docstrings |= {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    docstrings |= {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog")
        for part in ast.walk(node.value)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value
        elif isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.lineno, node.name
        elif isinstance(node, ast.alias):
            yield node.lineno, node.asname or node.name
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.lineno, node.arg


def test_words_split_identifiers_as_a_reader_would() -> None:
    assert {"sac", "config"} <= words("SACConfig")
    assert "td3" in words("TorchTD3") and "td3" in words("td3_mlp")
    assert "dqn" in words("epsilon greedy for DQN's agent")
    assert "ppo" not in words("apportion") and "sac" not in words("transact")


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_an_algorithm_is_named_only_in_its_own_places(name: str) -> None:
    allowed = own_places(name)
    found = []
    for pkg in PRODUCTION:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            if rel in allowed or name in SB3_IMPORT.get(rel, ()):
                continue
            found += [
                f"{rel}:{line}: {text[:60]!r}"
                for line, text in named(f)
                if name in words(text) and not text.startswith(FORMAT_STRINGS)
            ]
    assert found == [], f"{name} is named outside its row, config, agents and preset:\n" + "\n".join(found)


@pytest.mark.parametrize("driver", ["train/core/offpolicy_driver.py", "train/core/onpolicy_driver.py"])
def test_a_driver_asks_no_config_what_class_it_is(driver: str) -> None:
    """What differs per algorithm comes from the config's and the agent's methods, not from branches on
    their classes (SB3's off-policy loop checks only space and buffer types)."""
    tree = ast.parse((ROOT / driver).read_text())
    branches = [
        f"line {node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("isinstance", "issubclass", "type")
    ]
    assert branches == []
