"""The whole structure of a TFLite flatbuffer, verified before any interpreter sees the file.

The interpreters do not verify a model before using it: an offset that points into garbage is read as a
tensor name (a UnicodeDecodeError), a shape or an index (a crash, or a model that runs on whatever the
memory held). Which of those happens depends on the memory, so the same corrupt file was judged
differently from run to run (issue 52). This walk depends on the bytes alone: a file is refused with one
line naming the first thing wrong, or accepted, the same way every time.

What is checked, per schema.fbs (Model, SubGraph, Tensor, QuantizationParameters, Operator, Buffer,
Metadata, SignatureDef):
- every table, vtable, vector and string lies inside the file, and every field inside its table;
- every string is valid UTF-8 and NUL-terminated;
- tensor, buffer, operator-code and subgraph indices are in range (-1 only where the schema allows an
  optional tensor);
- a constant tensor's buffer holds exactly its shape's bytes; quantization vectors agree in length;
- buffer data overlaps no table, vtable, vector or string.

Operator option tables are checked as tables (and the few with vectors, Reshape's and Squeeze's, as those);
their scalar values are the kernels' to judge, and they refuse bad ones with a status, not a crash.
"""

from __future__ import annotations

import bisect
import math
import struct

from rl2edge.errors import ManifestError

IDENTIFIER = b"TFL3"
_ITEMSIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8, 15: 4, 16: 2, 18: 2}
"""TensorType -> bytes per element, for the types whose buffers are plain arrays (not STRING, RESOURCE,
VARIANT or the packed INT4/INT2)."""
_ZERO_POINT_RANGE = {3: (0, 255), 9: (-128, 127), 7: (-32768, 32767), 2: (-(2**31), 2**31 - 1), 17: (-8, 7)}
"""TensorType -> the zero points its values can hold (UINT8, INT8, INT16, INT32, INT4)."""
_OPTIONS_VECTORS = {17: (0,), 30: (0,)}
"""BuiltinOptions with vectors: ReshapeOptions.new_shape, SqueezeOptions.squeeze_dims (int32)."""

Table = tuple[int, tuple[int, ...], int]
"""(position, field offsets (0: absent), table size)."""


class FlatbufferVerifier:
    def __init__(self, data: bytes, name: str):
        self.data, self.name = data, name
        self.regions: list[tuple[int, int, str]] = [(0, 8, "the header")]
        self.buffer_regions: list[tuple[int, int, int]] = []

    # ------------------------------------------------------------------ primitives, bounds-checked

    def fail(self, why: str) -> ManifestError:
        return ManifestError(f"{self.name} is corrupt: {why}; re-copy or re-export the artifact")

    def need(self, pos: int, size: int, what: str) -> None:
        if pos < 0 or size < 0 or pos + size > len(self.data):
            raise ManifestError(
                f"{self.name} is corrupt or truncated: its {what} lies at bytes {pos}..{pos + size} of a "
                f"{len(self.data)}-byte file; re-copy or re-export the artifact"
            )

    def u32(self, pos: int, what: str) -> int:
        self.need(pos, 4, what)
        return int(struct.unpack_from("<I", self.data, pos)[0])

    def table(self, pos: int, what: str) -> Table:
        self.need(pos, 4, what)
        vtable = pos - struct.unpack_from("<i", self.data, pos)[0]
        self.need(vtable, 4, f"{what}'s vtable")
        vsize, tsize = struct.unpack_from("<HH", self.data, vtable)
        if vsize < 4 or vsize % 2 or tsize < 4:
            raise self.fail(f"{what} has a malformed vtable")
        self.need(vtable, vsize, f"{what}'s vtable")
        self.need(pos, tsize, what)
        fields = struct.unpack_from(f"<{(vsize - 4) // 2}H", self.data, vtable + 4)
        for i, off in enumerate(fields):
            if off and off + 1 > tsize:
                raise self.fail(f"field {i} of {what} lies outside the table")
        self.regions += [(pos, pos + tsize, what), (vtable, vtable + vsize, f"{what}'s vtable")]
        return pos, tuple(fields), tsize

    def _field(self, t: Table, index: int, size: int, what: str) -> int | None:
        pos, fields, tsize = t
        if index >= len(fields) or not fields[index]:
            return None
        if fields[index] + size > tsize:
            raise self.fail(f"field {index} of {what} runs past the end of its table")
        return pos + fields[index]

    def scalar(self, t: Table, index: int, fmt: str, what: str, default: int = 0) -> int:
        at = self._field(t, index, struct.calcsize(fmt), what)
        return default if at is None else int(struct.unpack_from("<" + fmt, self.data, at)[0])

    def ref(self, t: Table, index: int, what: str) -> int | None:
        at = self._field(t, index, 4, what)
        return None if at is None else at + self.u32(at, what)

    def vector(self, t: Table, index: int, elem: int, what: str, data: bool = False) -> tuple[int, int]:
        """(start of the elements, count); (0, 0) if absent. `data`: a buffer's bytes (checked against
        the structure for overlap, not part of it)."""
        at = self.ref(t, index, what)
        if at is None:
            return 0, 0
        n = self.u32(at, f"{what}'s length")
        self.need(at + 4, n * elem, what)
        if data:
            self.regions.append((at, at + 4, f"{what}'s length"))
        else:
            self.regions.append((at, at + 4 + n * elem, what))
        return at + 4, n

    def ints(self, t: Table, index: int, what: str) -> list[int]:
        start, n = self.vector(t, index, 4, what)
        return list(struct.unpack_from(f"<{n}i", self.data, start)) if n else []

    def tables(self, t: Table, index: int, what: str) -> list[Table]:
        start, n = self.vector(t, index, 4, what)
        return [
            self.table(start + 4 * i + self.u32(start + 4 * i, f"{what}[{i}]"), f"{what}[{i}]")
            for i in range(n)
        ]

    def string(self, t: Table, index: int, what: str) -> str | None:
        at = self.ref(t, index, what)
        if at is None:
            return None
        n = self.u32(at, f"{what}'s length")
        self.need(at + 4, n + 1, what)
        if self.data[at + 4 + n] != 0:
            raise self.fail(f"{what} is not NUL-terminated")
        self.regions.append((at, at + 5 + n, what))
        try:
            return self.data[at + 4 : at + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    # ------------------------------------------------------------------ the schema

    def verify(self) -> None:
        if len(self.data) < 8 or self.data[4:8] != IDENTIFIER:
            raise ManifestError(
                f"{self.name} is not a TFLite model (no {IDENTIFIER.decode()} identifier); re-export the artifact"
            )
        model = self.table(self.u32(0, "root offset"), "model table")
        codes = self.tables(model, 1, "operator_codes")
        for i, code in enumerate(codes):
            self.string(code, 1, f"operator_codes[{i}].custom_code")
        buffers = self.tables(model, 4, "buffers")
        subgraphs = self.tables(model, 2, "subgraphs")
        if not subgraphs:
            raise self.fail("it holds no subgraph")
        self.string(model, 3, "description")
        sizes = [self._buffer(b, i) for i, b in enumerate(buffers)]
        n_tensors = [self._subgraph(sg, i, len(codes), sizes) for i, sg in enumerate(subgraphs)]
        for j in self.ints(model, 5, "metadata_buffer"):
            self._index(j, len(buffers), "metadata_buffer entry", "buffer")
        for i, meta in enumerate(self.tables(model, 6, "metadata")):
            self.string(meta, 0, f"metadata[{i}].name")
            self._index(
                self.scalar(meta, 1, "I", "metadata"), len(buffers), f"metadata[{i}].buffer", "buffer"
            )
        for i, sig in enumerate(self.tables(model, 7, "signature_defs")):
            self.string(sig, 2, f"signature_defs[{i}].signature_key")
            sg = self._index(
                self.scalar(sig, 4, "I", "signature"), len(subgraphs), f"signature_defs[{i}]", "subgraph"
            )
            for field, side in ((0, "inputs"), (1, "outputs")):
                for k, tmap in enumerate(self.tables(sig, field, f"signature_defs[{i}].{side}")):
                    where = f"signature_defs[{i}].{side}[{k}]"
                    self.string(tmap, 0, f"{where}.name")
                    self._index(self.scalar(tmap, 1, "I", where), n_tensors[sg], where, "tensor")
        self._no_overlap()

    def _buffer(self, buf: Table, i: int) -> int | None:
        """The buffer's size in bytes (None: empty)."""
        start, n = self.vector(buf, 0, 1, f"buffer {i} data", data=True)
        if n:
            self.buffer_regions.append((start, start + n, i))
        offset, size = self.scalar(buf, 1, "Q", f"buffer {i}"), self.scalar(buf, 2, "Q", f"buffer {i}")
        if offset > 1:  # data kept after the flatbuffer (models over 2 GB); 1 marks an empty buffer
            self.need(offset, size, f"buffer {i} data")
            self.buffer_regions.append((offset, offset + size, i))
            return size or None
        return n or None

    def _subgraph(self, sg: Table, i: int, n_codes: int, sizes: list[int | None]) -> int:
        where = f"subgraph {i}"
        tensors = self.tables(sg, 0, f"{where} tensors")
        n = len(tensors)
        for j, tensor in enumerate(tensors):
            self._tensor(tensor, f"{where} tensor {j}", sizes)
        for field, side in ((1, "inputs"), (2, "outputs")):
            for k in self.ints(sg, field, f"{where} {side}"):
                self._index(k, n, f"{where} {side} entry", "tensor")
        for k, op in enumerate(self.tables(sg, 3, f"{where} operators")):
            at = f"{where} operator {k}"
            self._index(self.scalar(op, 0, "I", at), n_codes, f"{at} opcode_index", "operator code")
            for field, side in ((1, "inputs"), (2, "outputs"), (8, "intermediates")):
                for t in self.ints(op, field, f"{at} {side}"):
                    if t != -1:  # -1: an optional input left out
                        self._index(t, n, f"{at} {side} entry", "tensor")
            self.vector(op, 5, 1, f"{at} custom_options")
            self.vector(op, 7, 1, f"{at} mutating_variable_inputs")
            for type_field, options_field in ((3, 4), (11, 12)):
                kind = self.scalar(op, type_field, "B", at)
                ref = self.ref(op, options_field, f"{at} options")
                if ref is not None:
                    options = self.table(ref, f"{at} options")
                    for v in _OPTIONS_VECTORS.get(kind, ()) if type_field == 3 else ():
                        self.vector(options, v, 4, f"{at} options vector")
        self.string(sg, 4, f"{where} name")
        return n

    def _tensor(self, t: Table, where: str, sizes: list[int | None]) -> None:
        shape = self.ints(t, 0, f"{where} shape")
        if any(d < 0 for d in shape):
            raise self.fail(f"{where} has a negative dimension in its shape {shape[:8]}")
        self.ints(t, 7, f"{where} shape_signature")
        kind = self.scalar(t, 1, "b", where)
        buffer = self._index(self.scalar(t, 2, "I", where), len(sizes), f"{where} buffer", "buffer")
        self.string(t, 3, f"{where} name")
        q = self.ref(t, 4, f"{where} quantization")
        if q is not None:
            quant = self.table(q, f"{where} quantization")
            for f in (0, 1):  # min, max
                self.vector(quant, f, 4, f"{where} quantization vector")
            s_at, scales = self.vector(quant, 2, 4, f"{where} quantization scales")
            z_at, zeros = self.vector(quant, 3, 8, f"{where} quantization zero points")
            if zeros and scales != zeros:
                raise self.fail(f"{where} has {scales} quantization scales and {zeros} zero points")
            # the int8 kernels index tables and shift by these without checking them: a zero point out of
            # its type's range read a wild address (a SIGSEGV found by the fuzz corpus)
            for scale in struct.unpack_from(f"<{scales}f", self.data, s_at) if scales else ():
                if not (math.isfinite(scale) and scale > 0):
                    raise self.fail(f"{where} has a quantization scale of {scale!r}")
            lo, hi = _ZERO_POINT_RANGE.get(kind, (-(2**63), 2**63 - 1))
            for zero in struct.unpack_from(f"<{zeros}q", self.data, z_at) if zeros else ():
                if not lo <= zero <= hi:
                    raise self.fail(f"{where} has a zero point of {zero}, outside its type's {lo}..{hi}")
            details = self.ref(quant, 5, f"{where} quantization details")
            if details is not None:
                self.table(details, f"{where} quantization details")
            axis = self.scalar(quant, 6, "i", where)
            if scales > 1 and not 0 <= axis < max(len(shape), 1):
                raise self.fail(f"{where} is quantized along dimension {axis} of a rank-{len(shape)} tensor")
        sparsity = self.ref(t, 6, f"{where} sparsity")
        if sparsity is not None:
            sp = self.table(sparsity, f"{where} sparsity")
            self.ints(sp, 0, f"{where} traversal_order")
            self.ints(sp, 1, f"{where} block_map")
            self.tables(sp, 2, f"{where} dim_metadata")
        size = sizes[buffer]
        if size is not None and sparsity is None and kind in _ITEMSIZE:
            want = _ITEMSIZE[kind]
            for d in shape:
                want *= d
            if want != size:
                raise self.fail(f"{where} takes {want} bytes, its buffer {buffer} holds {size}")

    def _index(self, value: int, count: int, what: str, of: str) -> int:
        if not 0 <= value < count:
            raise self.fail(f"{what} names {of} {value}; there are {count}")
        return value

    def _no_overlap(self) -> None:
        structure = sorted((a, b) for a, b, _ in self.regions)
        starts = [a for a, _ in structure]
        ends_so_far: list[int] = []
        top = -1
        for _, b in structure:
            top = max(top, b)
            ends_so_far.append(top)
        for lo, hi, i in self.buffer_regions:
            k = bisect.bisect_left(starts, hi) - 1  # the last structure starting before the data ends
            if k >= 0 and ends_so_far[k] > lo:
                raise self.fail(f"buffer {i}'s data overlaps the model's tables")


def verify_tflite(data: bytes, name: str) -> None:
    """ManifestError (one line) unless `data` is a structurally sound TFLite flatbuffer."""
    FlatbufferVerifier(data, name).verify()
