"""The event record, op codes, kinds and API names — read from the C contract.

``native/shim/events.h`` (installed as ``_native/include/events.h``) is parsed
with cffi to build the numpy dtype of one record, so Python and C cannot drift
apart; ``hooks.def`` gives the API name of every id (line order, from 1).
"""
from __future__ import annotations

import functools
import os
import re

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)


def _contract_file(name: str) -> str:
    for base in (os.path.join(_PKG, "_native", "include"),
                 os.path.join(os.path.dirname(_PKG), "native", "shim")):
        p = os.path.join(base, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{name} not found: is pyinterpose built? (python pyinterpose/_build.py)")


@functools.lru_cache(maxsize=None)
def _ffi():
    from cffi import FFI  # lazy: cffi and its C parser load on the first layout query, not at import

    with open(_contract_file("events.h")) as f:
        text = f.read()
    cdef = re.search(r"/\* BEGIN CDEF \*/(.*)/\* END CDEF \*/", text, re.S).group(1)
    ffi = FFI()
    ffi.cdef(cdef)
    return ffi


def _numpy_type(ctype) -> np.dtype:
    kind = ctype.cname
    table = {"uint64_t": "<u8", "int64_t": "<i8", "uint32_t": "<u4", "int32_t": "<i4",
             "uint16_t": "<u2", "int16_t": "<i2", "uint8_t": "u1", "char": "S1"}
    if ctype.kind == "array":
        return np.dtype((_numpy_type(ctype.item), ctype.length))
    return np.dtype(table[kind])


@functools.lru_cache(maxsize=None)
def event_dtype() -> np.dtype:
    """numpy dtype of ``struct pi_event`` with the C offsets and size."""
    ffi = _ffi()
    t = ffi.typeof("pi_event")
    names, formats, offsets = [], [], []
    for name, field in t.fields:
        names.append(name)
        formats.append(_numpy_type(field.type))
        offsets.append(field.offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": ffi.sizeof(t)})


@functools.lru_cache(maxsize=None)
def header_layout() -> dict[str, tuple[int, np.dtype]]:
    """Field -> (offset, numpy dtype) of ``struct pi_ring_header``."""
    ffi = _ffi()
    t = ffi.typeof("pi_ring_header")
    # the scalar and text fields (the intents, an array of structs, are the drain's own: drain.c)
    return {name: (f.offset, _numpy_type(f.type)) for name, f in t.fields
            if (f.type.item if f.type.kind == "array" else f.type).kind == "primitive"}


@functools.lru_cache(maxsize=None)
def ring_version() -> int:
    """PI_RING_VERSION of events.h: the header layout this drain understands."""
    with open(_contract_file("events.h")) as f:
        text = f.read()
    return int(re.search(r"#define PI_RING_VERSION (\d+)", text).group(1))


def header_size() -> int:
    return _ffi().sizeof("pi_ring_header")


def _enum(prefix: str) -> dict[int, str]:
    ffi = _ffi()
    out = {}
    for typ in ("enum pi_op", "enum pi_kind", "enum pi_access_flags"):
        for value, name in ffi.typeof(typ).elements.items():
            if name.startswith(prefix):
                out[value] = name[len(prefix):].lower()
    return out


@functools.lru_cache(maxsize=None)
def ops() -> dict[str, int]:
    return {v: k for k, v in _enum("PI_OP_").items()}


OP = type("OP", (), {})  # filled below: OP.ALLOC == 1, ...


@functools.lru_cache(maxsize=None)
def kinds() -> dict[int, str]:
    return _enum("PI_KIND_")


@functools.lru_cache(maxsize=None)
def api_names() -> list[str]:
    """API id -> name; index 0 is '' (no API)."""
    text = open(_contract_file("hooks.def")).read()
    return [""] + re.findall(r"^HOOK\((\w+),", text, re.M)


STR_PAYLOAD = 32  # bytes of text per PI_OP_STRDATA record (events.h)


def _init_op():
    for name, value in ops().items():
        setattr(OP, name.upper(), value)


try:
    _init_op()
except FileNotFoundError:  # unbuilt source tree: resolved at first use instead
    pass
