"""The node-map loader never crashes: 10,000 random mutations of the example map (values swapped for odd
ones, keys dropped, odd node references) and 3,000 byte-level corruptions of its YAML text each end in a
node map that serve accepts or one ConfigError line, never another exception. Every accepted map also
goes through what serve does with it before connecting (the bridge's checks, the safe action and the
observation bounds against a real policy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.client import BridgeConfig
from rl2edge.plc_bridge.loop import ControlLoop, LoopConfig
from rl2edge.plc_bridge.nodemap import load_node_map
from rl2edge.runtime import Policy
from testkit.fuzz import ODD_SCALARS, mutate

EXAMPLE = Path(__file__).parents[1] / "docs" / "examples" / "plant.yaml"

_ODD: list[Any] = [
    *ODD_SCALARS,
    "ns=",
    "ns=x;s=a",
    "ns=-1;i=5",
    "ns=2;i=99999999999999999999",
    "nsu=;s=a",
    "nsu=urn:x;q=1",
    "ns=2;g=not-a-guid",
    "ns=2;b=!!!",
    "2:",
    "/",
    "2:a/",
    "x" * 5000,
    "ns=2;s=\x00",
    [],
    {},
    [1, 2],
    ["ns=2;s=a", 3],
    {"node": "ns=2;s=a", "nodes": ["ns=2;s=b"]},
    {"nodes": []},
    {"node": ""},
    [None, 1.0],
    [1e400],
    {"a": 1},
]


def _serve_accepts(path: Path, policy: Policy) -> str:
    """'accepted' or 'refused' (one line); anything else fails the test."""
    try:
        node_map = load_node_map(path)
        ControlLoop(policy, BridgeConfig("opc.tcp://127.0.0.1:4840", node_map=node_map), LoopConfig())
        return "accepted"
    except ConfigError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return "refused"


@pytest.fixture(scope="module")
def policy(cartpole_all) -> Policy:
    return Policy.load(cartpole_all[1] / "fp32")


@pytest.mark.parametrize("count", [3_000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_mutated_node_maps_load_or_fail_in_one_line(count: int, policy: Policy, tmp_path: Path) -> None:
    """3,000 mutations in the default tests (some 10 s), 10,000 as `slow`."""
    base = yaml.safe_load(EXAMPLE.read_text())
    base["obs_low"], base["obs_high"] = [-4.8, None, -0.42, None], [4.8, None, 0.42, None]
    rng = np.random.default_rng(0)
    path = tmp_path / "map.yaml"
    outcomes = {"accepted": 0, "refused": 0}
    for i in range(count):
        mutated = mutate(base, rng, _ODD, drop=0.15, unknown_keys=_ODD[8:12])
        path.write_text(yaml.safe_dump(mutated, allow_unicode=True))
        try:
            outcomes[_serve_accepts(path, policy)] += 1
        except AssertionError:
            raise
        except Exception as exc:  # a traceback for the user: the defect this test exists for
            pytest.fail(f"mutation {i} raised {type(exc).__name__}: {exc}\n{path.read_text()[:2000]}")
    assert outcomes["accepted"] > count // 100 and outcomes["refused"] > count // 10, outcomes


def test_corrupted_yaml_text_loads_or_fails_in_one_line(policy: Policy, tmp_path: Path) -> None:
    text = EXAMPLE.read_bytes()
    rng = np.random.default_rng(1)
    path = tmp_path / "map.yaml"
    outcomes = {"accepted": 0, "refused": 0}
    specials = [b"[", b"{", b"&a ", b"*a", b"!!python/object:os.system", b"\x00", b"\xff", b":", b"- ", b"\t"]
    for i in range(3_000):
        b = bytearray(text)
        for _ in range(int(rng.integers(1, 6))):
            at = int(rng.integers(len(b)))
            r = rng.random()
            if r < 0.4:
                b[at] = int(rng.integers(256))
            elif r < 0.7:
                b[at:at] = specials[int(rng.integers(len(specials)))]
            else:
                del b[at : at + int(rng.integers(1, 20))]
        path.write_bytes(bytes(b))
        try:
            outcomes[_serve_accepts(path, policy)] += 1
        except AssertionError:
            raise
        except Exception as exc:
            pytest.fail(f"corruption {i} raised {type(exc).__name__}: {exc}\n{bytes(b)[:2000]!r}")
    assert outcomes["refused"] > 100, outcomes


_HOSTILE = {
    "deep-nesting": "observation: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "alias-bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "observation: *i\n",
    "huge-file": "observation: ns=2;s=a\n" + "#" * (2 << 20) + "\n",
    "python-object": "observation: !!python/object/apply:os.system ['true']\n",
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_hostile_yaml_is_refused_in_one_line(name: str, tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(_HOSTILE[name])
    with pytest.raises(ConfigError) as info:
        load_node_map(path)
    assert "\n" not in str(info.value)
