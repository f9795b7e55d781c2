"""A streaming writer of pickles made of built-in objects (dict, list, tuple, str, int, bool, None),
for outputs too large to build as Python objects first (the memory-viz export at 10 M events).

It writes protocol-4 opcodes directly (their definitions: CPython's ``pickletools``), restricted to
those PyTorch's JavaScript unpickler (``MemoryViz.js``) reads too: PROTO, EMPTY_DICT, EMPTY_LIST,
MARK, SETITEMS, APPENDS, TUPLE1-3, NEWTRUE/NEWFALSE, NONE, BININT1/BININT2/BININT, LONG1 (at most 8
bytes, so the JS side gets a Number), SHORT_BINUNICODE/BINUNICODE, MEMOIZE and BINGET/LONG_BINGET,
and STOP.  Every string is memoized on first use and referenced afterwards; lists may be
memoized so that shared lists stay shared.  APPENDS and SETITEMS carry at most 1000 items (the JS
unpickler spreads them as call arguments).

:func:`write_rows` writes many dicts of one shape at C speed: each row's bytes come from a
template (constant opcodes, memo references) with holes filled from integer columns, the rows
of several shapes interleaved in a given order (see its docstring).  No FRAME opcodes are
written (framing is optional in protocol 4).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Sequence

import numpy as np
from .chunks import in_order

PROTO4 = b"\x80\x04"
EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, STOP = b"}", b"]", b"(", b"u", b"e", b"."
MEMOIZE, BINGET, LONG_BINGET = b"\x94", b"h", b"j"
BININT1, BININT2, BININT, LONG1 = b"K", b"M", b"J", b"\x8a"
SHORT_BINUNICODE, BINUNICODE = b"\x8c", b"X"
NEWTRUE, NEWFALSE, NONE = b"\x88", b"\x89", b"N"
TUPLE_N = {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}
BATCH = 1000  # items per APPENDS / SETITEMS, as CPython's pickler


def int_bytes(v: int) -> bytes:
    """The shortest opcode for an int (as CPython's pickler chooses), LONG1 within 8 bytes."""
    if 0 <= v < 256:
        return BININT1 + bytes((v,))
    if 0 <= v < 65536:
        return BININT2 + struct.pack("<H", v)
    if -(1 << 31) <= v < (1 << 31):
        return BININT + struct.pack("<i", v)
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(f"int {v} does not fit in 8 bytes")
    n = ((v if v >= 0 else ~v).bit_length() + 8) // 8   # minimal two's complement length
    return LONG1 + bytes((n,)) + v.to_bytes(n, "little", signed=True)


def ref_bytes(idx: int) -> bytes:
    return BINGET + bytes((idx,)) if idx < 256 else LONG_BINGET + struct.pack("<I", idx)


class PickleStream:
    """Writes one pickle to a binary file: ``begin()``, then objects and containers, ``end()``."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.memo_len = 0
        self._strs: dict[str, int] = {}
        self._lists: dict[int, tuple[int, Any]] = {}   # id -> (memo index, the object, kept alive)
        self._buf: list[bytes] = []
        self._size = 0

    # -- raw output -------------------------------------------------------------------------
    def write(self, b: bytes) -> None:
        self._buf.append(b)
        self._size += len(b)
        if self._size >= 1 << 20:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            self.f.write(b"".join(self._buf))
            self._buf.clear()
            self._size = 0

    def begin(self) -> None:
        self.write(PROTO4)

    def end(self) -> None:
        self.write(STOP)
        self.flush()

    def _memoize(self) -> int:
        self.write(MEMOIZE)
        self.memo_len += 1
        return self.memo_len - 1

    # -- objects ----------------------------------------------------------------------------
    def str_index(self, s: str) -> int | None:
        return self._strs.get(s)

    def list_index(self, obj: list) -> int | None:
        hit = self._lists.get(id(obj))
        return hit[0] if hit is not None else None

    def obj(self, x: Any) -> None:
        """Write ``x`` (built-in types only); strings and lists already written become references."""
        if x is None:
            self.write(NONE)
        elif x is True or x is False:
            self.write(NEWTRUE if x else NEWFALSE)
        elif type(x) is int:
            self.write(int_bytes(x))
        elif type(x) is str:
            i = self._strs.get(x)
            if i is not None:
                self.write(ref_bytes(i))
                return
            b = x.encode("utf-8", "surrogatepass")
            self.write((SHORT_BINUNICODE + bytes((len(b),)) if len(b) < 256 else BINUNICODE + struct.pack("<I", len(b))) + b)
            self._strs[x] = self._memoize()
        elif type(x) is list:
            hit = self._lists.get(id(x))
            if hit is not None:
                self.write(ref_bytes(hit[0]))
                return
            self.write(EMPTY_LIST)
            self._lists[id(x)] = (self._memoize(), x)
            for k in range(0, len(x), BATCH):
                self.write(MARK)
                for v in x[k:k + BATCH]:
                    self.obj(v)
                self.write(APPENDS)
        elif type(x) is tuple:
            if len(x) <= 3:
                for v in x:
                    self.obj(v)
                self.write(TUPLE_N[len(x)])
            else:
                self.write(MARK)
                for v in x:
                    self.obj(v)
                self.write(b"t")
        elif type(x) is dict:
            self.write(EMPTY_DICT)
            items = list(x.items())
            for k in range(0, len(items), BATCH):
                self.write(MARK)
                for key, v in items[k:k + BATCH]:
                    self.obj(key)
                    self.obj(v)
                self.write(SETITEMS)
        else:
            raise TypeError(f"cannot write {type(x).__name__} (built-in dict/list/tuple/str/int/bool/None only)")


# ---- many dicts of one shape, from columns -----------------------------------------------------

@dataclass(frozen=True)
class Int:
    """A field whose value is an int from ``columns[name]``."""
    name: str


@dataclass(frozen=True)
class Ref:
    """A field whose value is the memoized object whose memo index is in ``columns[name]``."""
    name: str


@dataclass(frozen=True)
class Const:
    """A field whose value is a memoized object (memo index ``index``), the same in every row."""
    index: int


Field = tuple[int, Any]   # (memo index of the key string, Int | Ref | Const)
Shape = Sequence[Sequence[Field]]   # a row: one or more dicts (list items) of these fields


def _int_width(col: np.ndarray) -> int:
    if len(col) == 0:
        return 1
    lo, hi = int(col.min()), int(col.max())
    if lo >= 0 and hi < 256:
        return 1
    if lo >= 0 and hi < 65536:
        return 2
    if lo >= -(1 << 31) and hi < (1 << 31):
        return 4
    for n in (5, 6, 7):                  # LONG1 of n bytes (two's complement, sign included)
        if lo >= -(1 << (8 * n - 1)) and hi < (1 << (8 * n - 1)):
            return 10 + n
    return 18


# width code -> (opcode prefix, bytes in the hole): 1, 2, 4 = BININT1/BININT2/BININT; 10 + n = LONG1 of n bytes
_INT_PREFIX = {1: (BININT1, 1), 2: (BININT2, 2), 4: (BININT, 4),
               **{10 + n: (LONG1 + bytes((n,)), n) for n in (5, 6, 7, 8)}}


def _layout(shape: Shape, widths: dict[str, int]) -> tuple[bytes, list[tuple[int, str, int]]]:
    """The template bytes of one row and its holes [(offset, column, width)]."""
    out = bytearray()
    holes: list[tuple[int, str, int]] = []
    for fields in shape:
        out += EMPTY_DICT + MARK
        for key, val in fields:
            out += ref_bytes(key)
            if isinstance(val, Const):
                out += ref_bytes(val.index)
            elif isinstance(val, Int):
                prefix, w = _INT_PREFIX[widths[val.name]]
                out += prefix
                holes.append((len(out), val.name, w))
                out += bytes(w)
            else:  # Ref
                w = widths[val.name]
                out += BINGET if w == 1 else LONG_BINGET
                holes.append((len(out), val.name, w))
                out += bytes(w)
        out += SETITEMS
    return bytes(out), holes


def write_rows(ps: PickleStream, shapes: Sequence[Shape], kind: np.ndarray, columns: dict[str, np.ndarray],
               ref_widths: dict[str, int], chunk: int = 1 << 16, threads: int = 1) -> int:
    """Append to the list being written (``EMPTY_LIST`` already written) one row per element of
    ``kind``, in order: row ``j`` is the dicts of ``shapes[kind[j]]`` with its ``Int``/``Ref`` fields
    taken from ``columns[name][j]`` (int64).  ``ref_widths`` gives, per Ref column, 1 (BINGET:
    every index < 256) or 4 (LONG_BINGET).  Every memo index used must already be memoized.
    Items are grouped in APPENDS of at most BATCH.  Returns the number of list items written.
    (:func:`write_rows_from` with the columns given whole.)"""

    kind = np.asarray(kind, np.int64)

    def fetch(c0: int, c1: int):
        return kind[c0:c1], {name: col[c0:c1] for name, col in columns.items()}

    return write_rows_from(ps, shapes, len(kind), fetch, ref_widths, chunk=chunk, threads=threads)


def write_rows_from(ps: PickleStream, shapes: Sequence[Shape], n: int, fetch, ref_widths: dict[str, int],
                    chunk: int = 1 << 16, threads: int = 1) -> int:
    """:func:`write_rows` of ``n`` rows whose kinds and columns come a chunk at a time:
    ``fetch(c0, c1)`` returns ``(kind, columns)`` for rows ``[c0, c1)`` (arrays of ``c1 - c0``), so the
    whole columns never exist at once.  The bytes depend only on the rows and on ``chunk`` (each
    chunk's ints take the width its largest needs), never on how the caller holds its data.

    Each chunk of rows is built as a byte matrix, one row per row, from its shape's template
    (with MARK before and APPENDS after, kept only at batch boundaries), the holes filled by
    strided copies of the columns' little-endian bytes; a mask keeps each row's own length and
    the boolean selection concatenates the rows in order.  Chunks are built on ``threads``
    threads (report.chunks) and written in order."""

    per_row = [len(s) for s in shapes]
    per_row_arr = np.asarray(per_row, np.int64)
    rows_per_batch = max(1, BATCH // max(per_row))
    int_cols = sorted({v.name for s in shapes for fields in s for _, v in fields if isinstance(v, Int)})

    def build(c0: int) -> tuple[bytes, int]:
        c1 = min(n, c0 + chunk)
        k, columns = fetch(c0, c1)
        k = np.asarray(k, np.int64)
        m = c1 - c0
        widths = dict(ref_widths)
        for name in int_cols:
            widths[name] = _int_width(columns[name])
        lay = [_layout(s, widths) for s in shapes]
        W = 2 + max(len(t) for t, _ in lay)
        # 4 variants per shape: (batch start?, batch end?) -> template and mask rows
        tmpl = np.zeros((len(shapes) * 4, W), np.uint8)
        mask = np.zeros((len(shapes) * 4, W), bool)
        for s, (t, _) in enumerate(lay):
            L = len(t)
            for v in range(4):
                row = s * 4 + v
                tmpl[row, 0] = MARK[0]
                tmpl[row, 1:1 + L] = np.frombuffer(t, np.uint8)
                tmpl[row, 1 + L] = APPENDS[0]
                mask[row, 1:1 + L] = True
                mask[row, 0] = bool(v & 2)
                mask[row, 1 + L] = bool(v & 1)
        j = np.arange(c0, c1, dtype=np.int64)
        start = (j % rows_per_batch) == 0
        end = ((j % rows_per_batch) == rows_per_batch - 1) | (j == n - 1)
        code = k * 4 + start * 2 + end
        M = tmpl[code]
        for s, (t, holes) in enumerate(lay):
            if len(shapes) > 1:
                rows = np.flatnonzero(k == s)
                if len(rows) == 0:
                    continue
                # this shape's rows as a dense matrix: holes filled by strided copies of the
                # gathered columns, then the rows put back in one scatter
                L = 2 + len(t)
                sub = M[rows, :L]
                for off, name, w in holes:
                    col = np.ascontiguousarray(columns[name][rows], dtype="<i8")
                    sub[:, 1 + off:1 + off + w] = col.view(np.uint8).reshape(len(rows), 8)[:, :w]
                M[rows, :L] = sub
            else:
                for off, name, w in holes:
                    col = np.ascontiguousarray(columns[name], dtype="<i8")
                    M[:, 1 + off:1 + off + w] = col.view(np.uint8).reshape(m, 8)[:, :w]
        items = int(np.bincount(k, minlength=len(shapes)) @ per_row_arr) if m else 0
        return M[mask[code]].tobytes(), items

    total_items = 0
    for text, items in in_order(build, range(0, n, chunk), threads):
        ps.write(text)
        total_items += items
    return total_items
