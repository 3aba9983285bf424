"""Training metrics to CSV and TensorBoard, without tying the core to a framework.

TensorBoard events are written with the `tensorboard` package's own event writer and protos (the same
ones torch's SummaryWriter uses), so both backends share this module.
"""

from __future__ import annotations

import csv
import logging
import sys
import time
import types
from pathlib import Path
from typing import IO

_logger = logging.getLogger(__name__)


class MetricsLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self._csv_path = run_dir / "progress.csv"
        self._csv_file: IO[str] | None = None
        self._writer: csv.DictWriter[str] | None = None
        self._fields: list[str] = []
        self._tb = None
        if tensorboard:
            try:
                # TensorBoard's own switch ("no_tensorflow"): write events with its pure-Python stub instead
                # of importing TensorFlow, which would cost seconds and hundreds of MB in a torch run.
                sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
                from tensorboard.summary.writer.event_file_writer import EventFileWriter

                self._tb = EventFileWriter(str(run_dir / "tb"))
            except ImportError:  # the edge install has no tensorboard; CSV still works
                _logger.warning("tensorboard is not installed; writing CSV metrics only")

    def log(self, step: int, values: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in values.items()}}
        if self._writer is None or any(k not in self._fields for k in row):
            self._reopen(list(row))
        assert self._writer is not None and self._csv_file is not None
        self._writer.writerow(row)
        self._csv_file.flush()
        if self._tb is not None:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary

            summary = Summary(value=[Summary.Value(tag=k, simple_value=float(v)) for k, v in values.items()])
            self._tb.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def _reopen(self, fields: list[str]) -> None:
        # A new column appeared (e.g. the first evaluation): rewrite the header, keep earlier rows.
        rows: list[dict[str, str]] = []
        if self._csv_file is not None:
            self._csv_file.close()
            with open(self._csv_path, newline="") as f:
                rows = list(csv.DictReader(f))
        self._fields = list(dict.fromkeys([*self._fields, *fields]))
        self._csv_file = open(self._csv_path, "w", newline="")
        self._writer = csv.DictWriter(self._csv_file, fieldnames=self._fields, restval="")
        self._writer.writeheader()
        self._writer.writerows(rows)

    def close(self) -> None:
        if self._csv_file is not None:
            self._csv_file.close()
        if self._tb is not None:
            self._tb.close()
