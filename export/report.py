"""The export report: one row per produced file, as good exporters print it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl2edge.export.verify import parity_summary
from rl2edge.tables import markdown_table


@dataclass
class FileRow:
    mode: str
    path: Path
    size_bytes: int
    parity: dict[str, Any]
    closed_loop: dict[str, Any] | None
    """None: no env, so no closed loop."""
    latency: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "file": str(self.path),
            "size_bytes": self.size_bytes,
            "parity": self.parity,
            "closed_loop": self.closed_loop,
            "latency": self.latency,
        }


@dataclass
class ExportReport:
    out: Path
    env_id: str | None
    modes: list[str]
    source_return: dict[str, Any] | None
    onnx_parity: dict[str, Any] | None
    rows: list[FileRow] = field(default_factory=list)
    wall_time_s: float = 0.0
    source_name: str = "source"
    chosen: str | None = None
    """--quantize auto: the mode written to the artifact."""
    auto: dict[str, Any] | None = None
    """--quantize auto: the rule, the return floor and every candidate's figures it chose by (the
    manifest's quantization.auto)."""

    def auto_table(self) -> str:
        """--quantize auto's choice, from the figures it used: latencies measured interleaved, all files
        in one run (the table above measures one file after another, so its order may differ)."""
        if self.auto is None:
            return ""
        rows = [
            [
                c["mode"] + (" (chosen)" if c["mode"] == self.auto["chosen"] else ""),
                f"{c['predict_p50_us']:.1f}",
                f"{c['predict_p99_us']:.1f}",
                f"{c['mean_return']:.1f}",
                "yes" if c["within_drop"] else "no",
            ]
            for c in self.auto["candidates"]
        ]
        head = ["auto candidate", "p50 us (interleaved)", "p99 us", "mean return", "within the drop"]
        return (
            markdown_table(head, rows, pad=True)
            + f"\nrule: {self.auto['rule']}; return floor {self.auto['return_floor']:.1f}"
        )

    def table(self) -> str:
        headers = ["file", "mode", "size KB", "parity vs source", "return (mean +- std)", "predict p50 us"]
        lines = [
            [self.source_name, "-", "-", "-", _ret(self.source_return), "-"],
        ]
        if self.onnx_parity is not None:
            lines.append(["policy.onnx", "fp32", "-", parity_summary(self.onnx_parity), "-", "-"])
        for r in self.rows:
            lines.append(
                [
                    str(r.path),
                    r.mode,
                    f"{r.size_bytes / 1024:.1f}",
                    parity_summary(r.parity),
                    _ret(r.closed_loop),
                    f"{r.latency['p50_us']:.1f}",
                ]
            )
        return markdown_table(headers, lines, pad=True)

    def footer(self) -> str:
        first = self.out if len(self.modes) == 1 or self.chosen else self.out / self.modes[-1]
        chosen = f"auto chose {self.chosen}; " if self.chosen else ""
        return (
            f"export success ({self.wall_time_s:.1f} s), {chosen}saved as {self.out}\n"
            + (
                f"evaluate: rl2edge evaluate {first} --episodes 20 --seed 0   # in {self.env_id}\n"
                if self.env_id
                else "no closed-loop check was possible (no env): `rl2edge evaluate ARTIFACT --env ENV_ID` once there is one\n"
            )
            + f"serve:    rl2edge serve {first} --endpoint opc.tcp://PLC:4840 --map plant.yaml"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "env_id": self.env_id,
            "modes": self.modes,
            "source_return": self.source_return,
            "onnx_parity": self.onnx_parity,
            "files": [r.to_json() for r in self.rows],
            "wall_time_s": self.wall_time_s,
            "auto": self.auto,
        }


def _ret(r: dict[str, Any] | None) -> str:
    return "no env" if r is None else f"{r['mean_return']:.1f} +- {r['std_return']:.1f}"
