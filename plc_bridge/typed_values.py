"""OPC UA builtin types as a PLC declares them: which values a node can hold, how a value is encoded
for it, and how a counter wraps in it.

A PLC's data block is typed (REAL -> Float, INT -> Int16, DINT -> Int32, UINT -> UInt16, BOOL ->
Boolean, ...) and real servers refuse a value of another type or shape with BadTypeMismatch. So the
bridge writes exactly the node's type, range-checks what it writes, and counts modulo the node's range.
"""

from __future__ import annotations

import math
from typing import Any

from asyncua import ua

V = ua.VariantType

INT_RANGES: dict[ua.VariantType, tuple[int, int]] = {
    V.SByte: (-(1 << 7), (1 << 7) - 1),
    V.Byte: (0, (1 << 8) - 1),
    V.Int16: (-(1 << 15), (1 << 15) - 1),
    V.UInt16: (0, (1 << 16) - 1),
    V.Int32: (-(1 << 31), (1 << 31) - 1),
    V.UInt32: (0, (1 << 32) - 1),
    V.Int64: (-(1 << 63), (1 << 63) - 1),
    V.UInt64: (0, (1 << 64) - 1),
}
FLOAT_TYPES = frozenset({V.Float, V.Double})
SUPPORTED = frozenset({*INT_RANGES, *FLOAT_TYPES, V.Boolean})
_FLOAT32_MAX = 3.4028234663852886e38


def value_range(vtype: ua.VariantType) -> tuple[float, float]:
    """The closed range of numbers a node of this type can hold."""
    if vtype in INT_RANGES:
        lo, hi = INT_RANGES[vtype]
        return float(lo), float(hi)
    if vtype == V.Boolean:
        return 0.0, 1.0
    if vtype == V.Float:
        return -_FLOAT32_MAX, _FLOAT32_MAX
    return -math.inf, math.inf


def range_fits(inner: ua.VariantType, outer: ua.VariantType) -> bool:
    """Every value of `inner` is a value of `outer` (a sequence number echoed from one node to another)."""
    lo, hi = value_range(inner)
    olo, ohi = value_range(outer)
    return olo <= lo and hi <= ohi and (inner not in FLOAT_TYPES or outer in FLOAT_TYPES)


def wrap(value: int, vtype: ua.VariantType) -> int:
    """A counter's value in the node's range, two's complement style: Int16 32767 + 1 -> -32768, UInt16
    65535 + 1 -> 0, as the PLC's own INT/UINT arithmetic wraps. Float and Boolean counters are refused at
    connect, so only integer types reach here."""
    lo, hi = INT_RANGES[vtype]
    return (value - lo) % (hi - lo + 1) + lo


def encode(value: float, vtype: ua.VariantType) -> Any:
    """The Python value asyncua encodes as `vtype`; ValueError if the node cannot hold it."""
    if vtype in FLOAT_TYPES:
        v = float(value)
        if vtype == V.Float and math.isfinite(v) and abs(v) > _FLOAT32_MAX:
            raise ValueError(f"{v:g} does not fit a Float")
        return v
    if vtype == V.Boolean:
        if value not in (0, 1):
            raise ValueError(f"{value!r} is not a Boolean (0 or 1)")
        return bool(value)
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{v} is not an integer")
    i = round(v)
    lo, hi = INT_RANGES[vtype]
    if not lo <= i <= hi:
        raise ValueError(f"{i} is outside {vtype.name}'s range [{lo}, {hi}]")
    return i
