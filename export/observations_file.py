"""Recorded plant observations for an export without a simulator (`--observations FILE`): a plant often has
logs and no simulator. An .npz (the array `observations`, or its only array), a CSV (one row per
observation, the columns in the spec's order: a Dict's keys concatenated; a header line of names is
skipped), or the folder of a flight recorder's trace (`serve --record DIR`: its valid observations, in
order; runtime.trace). The first two thirds of the rows calibrate int8, the last third is the held-out set every file is
compared with the source on; each part keeps its rows in order (a stateful policy runs them as one
sequence from a reset)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.export.calibration import RolloutData
from rl2edge.fileio import sha256_file
from rl2edge.runtime.trace import SEGMENT_PREFIX, is_trace, read_trace, segment_index
from rl2edge.specs import ObservationSpec

MIN_ROWS = 30


def read_observations(path: Path, observation: ObservationSpec) -> np.ndarray:
    """The file's rows as float32 [n, size]; a wrong width, a non-number, NaN or inf is one line naming where."""
    if path.is_dir():
        if not is_trace(path):
            raise ConfigError(
                f"observations {path} is a folder without trace segments; give an .npz, a .csv or serve's --record folder"
            )
        rows = trace_rows(path)
    elif not path.is_file():
        raise ConfigError(f"observations file {path} does not exist")
    elif path.suffix == ".npz":
        try:
            data = np.load(path)
            names = data.files
            name = "observations" if "observations" in names else (names[0] if len(names) == 1 else None)
            if name is None:
                raise ConfigError(f"{path} holds arrays {names}: name the observations `observations`")
            rows = np.asarray(data[name], np.float64)
        except ConfigError:
            raise
        except Exception as exc:  # numpy raises several types for a file that is no .npz
            raise ConfigError(f"observations file {path} is not an .npz of arrays: {exc}") from None
        rows = rows.reshape(len(rows), -1) if rows.ndim > 1 else rows.reshape(-1, 1)
    elif path.suffix == ".csv":
        rows = _csv(path)
    else:
        raise ConfigError(f"observations file {path}: give an .npz or a .csv file")
    if rows.shape[1] != observation.size:
        raise ConfigError(
            f"observations file {path} has {rows.shape[1]} columns; the policy's observation has {observation.size} "
            "values (a Dict's keys concatenated in the spec's order)"
        )
    bad = np.argwhere(~np.isfinite(rows))
    if len(bad):
        r, c = bad[0]
        raise ConfigError(
            f"observations file {path}: row {r + 1}, column {c + 1} is {rows[r, c]}; every value must be finite"
        )
    if len(rows) < MIN_ROWS:
        raise ConfigError(f"observations file {path} has {len(rows)} rows; give at least {MIN_ROWS}")
    return rows.astype(np.float32)


def trace_rows(path: Path) -> np.ndarray:
    """A trace's valid observations (whole and finite; INVALID cycles' are left out), in order."""
    trace = read_trace(path)
    rows, _ = trace.observations()
    return rows.astype(np.float64)


def _identity(path: Path) -> str:
    """sha256 of a file, or of a trace folder's segments in order (each file's digest, hashed)."""
    if not path.is_dir():
        return sha256_file(path)
    digest = hashlib.sha256()
    for seg in sorted(path.glob(f"{SEGMENT_PREFIX}*.jsonl"), key=segment_index):
        digest.update(sha256_file(seg).encode())
    return digest.hexdigest()


def _csv(path: Path) -> np.ndarray:
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    rows: list[list[float]] = []
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.split(",")]
        try:
            rows.append([float(c) for c in cells])
        except ValueError:
            if i == 0 and not rows:  # a header of names
                continue
            raise ConfigError(
                f"observations file {path}: line {i + 1} holds a value that is not a number: {line[:80]!r}"
            ) from None
        if len(rows[-1]) != len(rows[0]):
            raise ConfigError(
                f"observations file {path}: line {i + 1} has {len(rows[-1])} values, the first row {len(rows[0])}"
            )
    if not rows:
        raise ConfigError(f"observations file {path} holds no rows")
    return np.asarray(rows, np.float64)


def recorded_data(
    path: Path, rows: np.ndarray, max_calib: int, max_heldout: int, stateful: bool
) -> RolloutData:
    """Calibration and held-out data from recorded rows (module docstring)."""
    cut = (2 * len(rows)) // 3
    calibration, heldout = rows[:cut], rows[cut:]
    if stateful:  # whole sequences, in order, each from a reset
        calibration, heldout = calibration[:max_calib], heldout[:max_heldout]
    else:
        calibration, heldout = _spaced(calibration, max_calib), _spaced(heldout, max_heldout)
    starts = (lambda n: np.eye(1, n, dtype=bool)[0]) if stateful else None
    description: dict[str, Any] = {
        "source": f"recorded observations {path} (sha256 {_identity(path)})",
        "calibration": {"rows": f"the first two thirds of {len(rows)}", "samples": len(calibration)},
        "heldout": {"rows": "the last third, never seen by calibration", "samples": len(heldout)},
    }
    if stateful:
        description["sequences"] = (
            "each part one sequence in the file's order, the state reset at its first row"
        )
    return RolloutData(
        calibration,
        heldout,
        description,
        starts(len(calibration)) if starts else None,
        starts(len(heldout)) if starts else None,
    )


def _spaced(rows: np.ndarray, n: int) -> np.ndarray:
    if len(rows) <= n:
        return rows
    return rows[np.linspace(0, len(rows) - 1, n).round().astype(int)]
