"""Every numeric option of serve, evaluate, train, tune and plc-sim, through the real `main()`, with the
values an adversary tried: 0, negative, NaN, inf, 1e308, a range 10**12 wide and a wrong type. Each is
refused in one line with exit 2, or, where the table says so, accepted.

Before (issue 52): `--cpu-affinity 0-1000000000000` built the range in memory (17.7 GB in 25 s),
`--fault-seed -1` was a traceback, `--stats-interval nan` never wrote a stats line and 0 wrote one
every cycle."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl2edge import bounded
from rl2edge.cli.app import build_parser, main, parse_args

PROBES = ("0", "-1", "nan", "inf", "1e308", "0-1000000000000", "abc")

# The arguments each command needs besides the option under test (nothing runs: parsing refuses first).
BASE = {
    "serve": ["serve", "artifact", "--endpoint", "opc.tcp://127.0.0.1:4840"],
    "evaluate": ["evaluate", "artifact"],
    "train": ["train", "--algo", "ppo", "--env", "CartPole-v1"],
    "tune": ["tune", "--algo", "ppo", "--env", "CartPole-v1", "--space", "space.yml"],
    "plc-sim": ["plc-sim", "--env", "CartPole-v1"],
    "replay": ["replay", "artifact", "--trace", "trace"],
}

# Every numeric option, and which of PROBES it accepts (written out here, not derived from the parsers:
# a bound changed by mistake fails this table).
TABLE: dict[str, dict[str, set[str]]] = {
    "serve": {
        "--period-ms": set(),
        "--deadline-ms": set(),
        "--spin-ms": {"0"},
        "--timeout-ms": set(),
        "--stats-interval": set(),
        "--cycles": set(),
        "--threads": set(),
        "--noise-seed": {"0"},
        "--realtime": set(),
        "--cpu-affinity": {"0"},
        "--fault-seed": {"0"},
        "--watch-interval": set(),
        "--shadow-cycles": {"0"},
        "--shadow-min-agreement": {"0"},
        "--shadow-max-diff": {"0"},
        "--metrics-port": set(),
        "--health-periods": set(),
        "--record-max-mb": set(),
        "--drift-threshold": set(),
        "--drift-window": set(),
    },
    "evaluate": {
        "--episodes": set(),
        "--seed": {"0"},
        "--noise-seed": {"0"},
        "--period-ms": set(),
        "--fault-seed": {"0"},
    },
    "train": {
        "--steps": set(),
        "--seed": {"0"},
        "--seeds": {"0"},
        "--rollout-workers": {"0"},
        "--nproc": set(),
        "--threads": set(),
    },
    "tune": {
        "--trials": set(),
        "--seeds": {"0"},
        "--max-concurrent": set(),
        "--grace-steps": set(),
        "--reduction-factor": set(),
        "--search-seed": {"0"},
        "--max-failures": {"0"},
    },
    "plc-sim": {
        "--seed": {"0"},
        "--period-ms": set(),
        "--episodes": set(),
        "--invalid-rate": {"0"},
    },
    "replay": {
        "--min-agreement": {"0"},
        "--max-diff": {"0"},
    },
}
CASES = [(c, o, v, v in ok) for c, opts in TABLE.items() for o, ok in opts.items() for v in PROBES]


def _bounded_type(t: object) -> bool:
    return isinstance(t, bounded.Integer | bounded.Number) or t in (bounded.cpu_list, bounded.seed_list)


def test_the_table_names_every_numeric_option_and_each_has_a_bounded_parser() -> None:
    """A new numeric option with a plain int or float, or one left out of TABLE, fails here."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        plain = [a.option_strings[0] for a in parser._actions if a.type in (int, float)]
        assert not plain, f"{command}: {plain} take an unbounded int/float; give them a rl2edge.bounded type"
        if command in TABLE:
            typed = {a.option_strings[0] for a in parser._actions if _bounded_type(a.type)}
            assert typed == set(TABLE[command]), (command, typed ^ set(TABLE[command]))


@pytest.mark.parametrize(("command", "option", "value", "accepted"), CASES)
def test_a_numeric_option_is_refused_in_one_line_or_accepted(
    capsys: pytest.CaptureFixture[str], command: str, option: str, value: str, accepted: bool
) -> None:
    argv = [*BASE[command], f"{option}={value}"]
    if accepted:
        args = parse_args(argv)
        assert getattr(args, option.lstrip("-").replace("-", "_")) in (0, 0.0, (0,))
        return
    t0 = time.monotonic()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"rl2edge {command}: error: argument {option}: " in err and len(err) < 400, err
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("cpu_affinity: 0-1000000000000", "CPU 1000000000000 is not one this process may use"),
        ("stats_interval: .nan", "stats_interval: 'nan' is out of range"),
        ("stats_interval: 1.0e-9", "give a finite number from 0.1 to 86400 s"),
        ("fault_seed: -1", "fault_seed: '-1' is out of range"),
        ("period_ms: .inf", "period_ms: 'inf' is out of range"),
        ("cycles: 2.5", "cycles: '2.5': give a whole number"),
    ],
)
def test_the_config_file_goes_through_the_same_parsers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, fragment: str
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"artifact: art\nendpoint: opc.tcp://127.0.0.1:4840\n{line}\n")
    assert main(["serve", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1, err


def test_a_cpu_range_10_to_the_12_wide_is_refused_under_a_2_gb_address_space_limit() -> None:
    """The case that took 17.7 GB: refused by its ends, in a process that may not map more than 2 GB."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from rl2edge.cli.app import main\n"
        "sys.exit(main(['serve', 'art', '--endpoint', 'opc.tcp://127.0.0.1:4840', "
        "'--cpu-affinity', '0-1000000000000']))\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "MemoryError" not in proc.stderr, proc.stderr
    assert "--cpu-affinity" in proc.stderr and time.monotonic() - t0 < 30


MAP_BASE = (
    "observation: ns=2;s=O\nobservation_seq: ns=2;s=S\naction: ns=2;s=A\naction_seq: ns=2;s=AS\n"
    "heartbeat: ns=2;s=H\nstatus: ns=2;s=St\n"
)
YAML_PROBES = {
    "0": "0",
    "-1": "-1",
    "nan": ".nan",
    "inf": ".inf",
    "1e308": "1.0e+308",
    "range": "0-1000000000000",
    "abc": "abc",
}
# The node map's numbers, and which probes each accepts at load (safe_action and obs_low are checked
# against the artifact's bounds once it is loaded).
MAP_TABLE: dict[str, set[str]] = {
    "hold_ms": set(),
    "ramp_rate": {"1e308"},  # finite: a ramp that fast is the safe action at once
    "stale_ms": set(),
    "stale_cycles": set(),
    "obs_range_tolerance": {"0"},
    "safe_action": {"0", "-1", "1e308"},
    "obs_low": {"0", "-1", "1e308"},
}


@pytest.mark.parametrize(
    ("key", "probe", "accepted"),
    [(k, p, p in ok) for k, ok in MAP_TABLE.items() for p in YAML_PROBES],
)
def test_a_node_map_number_is_refused_in_one_line_or_accepted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, probe: str, accepted: bool
) -> None:
    path = tmp_path / "map.yaml"
    extra = "fault_response: {stale: ramp}\n" if key == "ramp_rate" else ""
    path.write_text(f"{MAP_BASE}{extra}{key}: {YAML_PROBES[probe]}\n")
    code = main(
        ["serve", str(tmp_path / "no-artifact"), "--endpoint", "opc.tcp://127.0.0.1:4840", "--map", str(path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if accepted:  # the map loaded; the missing artifact is what stopped serve
        assert "no-artifact" in err and key not in err, err
    else:
        assert key in err and "no-artifact" not in err, err
