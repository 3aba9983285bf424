"""Recorded plant observations for an export without a simulator (`--observations FILE`): a plant often has
logs and no simulator. An .npz (the array `observations`, or its only array), a CSV (one row per
observation, the columns in the spec's order: a Dict's keys concatenated; a header line of names is
skipped), or the folder of a flight recorder's trace (`serve --record DIR`: its valid observations, in
order; runtime.trace). The first two thirds of the rows calibrate int8, the last third is the held-out set every file is
compared with the source on; each part keeps its rows in order (a stateful policy runs them as one
sequence from a reset)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import ConfigError
from rl2edge.export.calibration import RolloutData
from rl2edge.fileio import sha256_file
from rl2edge.runtime.trace import SEGMENT_PREFIX, is_trace, read_trace, segment_index
from rl2edge.specs import ObservationSpec

MIN_ROWS = 30
FLOAT32_MAX = float(np.finfo(np.float32).max)
SENTINEL = 1e30
"""|x| at or above it is a sentinel, not a measurement (FLT_MAX, 1e30: what PLC logs write for 'no reading')."""

_logger = logging.getLogger(__name__)


def read_observations(path: Path, observation: ObservationSpec, stateful: bool = False) -> np.ndarray:
    """The file's rows as float32 [n, size]; a wrong width, a non-number, NaN or inf, or a value outside float32
    is one line naming where. Rows outside the spec's declared bounds are dropped (`stateful`: refused)."""
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
            raw = np.asarray(data[name])
            if raw.dtype.kind not in "fiub":  # complex (its imaginary part would be dropped), text, objects
                raise ConfigError(
                    f"observations file {path}: array {name!r} holds {raw.dtype} values; observations are real "
                    "numbers (float or int)"
                )
            if raw.size == 0:
                raise ConfigError(f"observations file {path}: array {name!r} holds no rows")
            rows = raw.astype(np.float64)
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
    big = np.argwhere(np.abs(rows) > FLOAT32_MAX)
    if len(big):
        r, c = big[0]
        raise ConfigError(
            f"observations file {path}: row {r + 1}, column {c + 1} is {rows[r, c]:g}, outside float32 "
            f"(|x| <= {FLOAT32_MAX:g}); every value must fit the observation's float32"
        )
    rows = _within_bounds(path, rows, observation, stateful)
    if len(rows) < MIN_ROWS:
        raise ConfigError(f"observations file {path} has {len(rows)} rows; give at least {MIN_ROWS}")
    return rows.astype(np.float32)


def _within_bounds(path: Path, rows: np.ndarray, observation: ObservationSpec, stateful: bool) -> np.ndarray:
    """Rows with a value outside the spec's declared bounds, or a sentinel (|x| >= 1e30: FLT_MAX, 1e30, a
    PLC's 'no reading'), are not plant states: one such row stretches int8's calibrated ranges (one row of
    1e30 among 300 took int8's agreement to 56 %). They are dropped with one warning; a stateful policy's
    rows are one sequence, so there they are refused."""
    low, high = observation.bounds
    lo = np.array([-np.inf if v is None else v for v in low], np.float64)
    hi = np.array([np.inf if v is None else v for v in high], np.float64)
    outside = (rows < lo) | (rows > hi) | (np.abs(rows) >= SENTINEL)
    bad = outside.any(axis=1)
    if not bad.any():
        return rows
    r = int(np.flatnonzero(bad)[0])
    c = int(np.flatnonzero(outside[r])[0])
    value = rows[r, c]
    why = (
        f"row {r + 1}, column {c + 1} is {value:g}"
        + (", a 'no reading' sentinel such as FLT_MAX or 1e30" if abs(value) >= SENTINEL else "")
        + (f", outside the declared [{lo[c]:g}, {hi[c]:g}]" if not lo[c] <= value <= hi[c] else "")
    )
    count = (
        f"{int(bad.sum())} of {len(rows)} rows are outside the spec's declared bounds or a sentinel ({why})"
    )
    if stateful:
        raise ConfigError(
            f"observations file {path}: {count}; a stateful policy runs the rows as one sequence, so none can "
            "be dropped: remove those stretches from the file, or record where the plant reports real values"
        )
    _logger.warning(
        "observations file %s: %s; they are dropped: calibrating int8 on them would stretch its ranges past "
        "every real observation",
        path,
        count,
    )
    return rows[~bad]


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
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"observations file {path} is not a text CSV (byte {exc.start} is not UTF-8); give comma-separated "
            "numbers, one observation per line, or an .npz"
        ) from None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
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
