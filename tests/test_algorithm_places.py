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


def owner(stem: str) -> str | None:
    """The algorithm a module under train/ is named for: the longest algorithm name its file name is or
    starts with (`sac_written_out` -> sac, `ppo_lstm` -> ppo_lstm, not ppo), or None."""
    names = [n for n in ALGOS if stem == n or stem.startswith(f"{n}_")]
    return max(names, key=len) if names else None


def builds_on(name: str) -> set[str]:
    """`name` and every algorithm it builds on, through the rows' `builds_on` (a2c_lstm: ppo_lstm, ppo, a2c)."""
    return {name}.union(*(builds_on(base) for base in ALGOS[name].builds_on))


def own_places(name: str) -> set[str]:
    """The files allowed to name `name`: its config's and agents' modules, the modules under train/ named
    for it (mixed into its agents: sac_written_out.py, dqn_hooks.py), the table and the nets; and the
    places of every algorithm that builds on it (its row's `builds_on`: A2C's agent names PPO's)."""
    places = set(TABLE_AND_NETS)
    for other in ALGOS.values():
        if name in builds_on(other.name):
            places |= {_module_file(other.config), *(_module_file(a) for a in other.agents.values())}
            places |= {
                str(f.relative_to(ROOT))
                for f in (ROOT / "train").rglob("*.py")
                if owner(f.stem) == other.name
            }
    return places


def tokens(text: str) -> list[str]:
    """The lower-case words of an identifier or string, in order: SACConfig -> sac, config; td3_mlp -> td3,
    mlp; ppo_lstm -> ppo, lstm."""
    out = []
    for token in re.split(r"[^A-Za-z0-9]+", text):
        for w in re.findall(r"[A-Z0-9]+(?=[A-Z][a-z]|\b|$)|[A-Z]?[a-z0-9]+|[A-Z0-9]+", token):
            out.append(w.lower())
    return out


def words(text: str) -> set[str]:
    return set(tokens(text))


def mentions(text: str, name: str) -> bool:
    """Whether `text` names the algorithm `name`: its words in a row (ppo_lstm: ppo, then lstm), and not
    the start of a longer algorithm's name (ppo in ppo_lstm names ppo_lstm, not ppo)."""
    words_, parts = tokens(text), name.split("_")
    longer = [n.split("_") for n in ALGOS if n.startswith(f"{name}_")]
    for i in range(len(words_) - len(parts) + 1):
        if words_[i : i + len(parts)] == parts and not any(words_[i : i + len(p)] == p for p in longer):
            return True
    return False


def named(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every identifier and string constant in `source`, docstrings excluded."""
    tree = ast.parse(source)
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
    assert mentions("ppo_lstm", "ppo_lstm") and mentions('algo = "a2c_lstm"', "a2c_lstm")
    assert not mentions("ppo_lstm", "ppo") and mentions("ppo or ppo_lstm", "ppo")
    assert not mentions("PPOLstm", "a2c_lstm") and not mentions("lstm_ppo", "ppo_lstm")
    assert owner("ppo_lstm") == "ppo_lstm" and owner("sac_written_out") == "sac" and owner("nets") is None


def production_files() -> list[tuple[str, str]]:
    return [
        (str(f.relative_to(ROOT)), f.read_text())
        for pkg in PRODUCTION
        for f in sorted((ROOT / pkg).rglob("*.py"))
    ]


def misplaced(name: str, files: list[tuple[str, str]]) -> list[str]:
    """Where `files` ((path, source) pairs) name `name` outside its own places."""
    allowed = own_places(name)
    found = []
    for rel, source in files:
        if rel in allowed or name in SB3_IMPORT.get(rel, ()):
            continue
        found += [
            f"{rel}:{line}: {text[:60]!r}"
            for line, text in named(source)
            if mentions(text, name) and not text.startswith(FORMAT_STRINGS)
        ]
    return found


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_an_algorithm_is_named_only_in_its_own_places(name: str) -> None:
    found = misplaced(name, production_files())
    assert found == [], f"{name} is named outside its row, config, agents and preset:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("name", "planted_in"),
    [
        ("ppo_lstm", "train/torch_backend/sac.py"),  # another algorithm's agent
        ("ppo_lstm", "train/torch_backend/ppo.py"),  # the algorithm it builds on
        ("rainbow", "train/core/dqn_hooks.py"),  # a module named for the algorithm it builds on
        ("a2c_lstm", "train/core/onpolicy_driver.py"),  # the driver
        ("sac", "train/torch_backend/td3_written_out.py"),  # a module named for another algorithm
    ],
)
def test_a_planted_mention_is_found(name: str, planted_in: str) -> None:
    """The check has no hole: one line naming `name` in a module that is not its place is a finding."""
    files = production_files()
    assert misplaced(name, files) == []
    planted = [(rel, src + f"\nPLANTED = {name!r}\n" if rel == planted_in else src) for rel, src in files]
    assert [f.split(":")[0] for f in misplaced(name, planted)] == [planted_in]


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
