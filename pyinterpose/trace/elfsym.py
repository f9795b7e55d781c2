"""A small ELF symbol reader for symbolising native frames after the run.

``symbolize([(path, address), ...]) -> {(path, address): name}``: ``address`` is a
return address relative to the object's load bias (what the shim recorded), so
the call instruction is at ``address - 1``.  Function symbols come from
``.symtab`` when the object has one, else ``.dynsym``.  Objects that are gone,
unreadable or not ELF64 little-endian are skipped (their frames keep ``0x…``).
"""
from __future__ import annotations

import struct

import numpy as np

_SYM = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                 ("size", "<u8")])
STT_FUNC, STT_GNU_IFUNC = 2, 10


def _read_symbols(path: str):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if not shoff or shentsize < 64 or shoff + shnum * shentsize > len(data):
        return None
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    best = None
    for want in (2, 11):  # SHT_SYMTAB, then SHT_DYNSYM
        for s in secs:
            if s[1] == want and s[7] and s[5]:
                best = s
                break
        if best:
            break
    if best is None:
        return None
    off, size, link = best[4], best[5], best[6]
    if off + size > len(data) or link >= len(secs):
        return None
    syms = np.frombuffer(data, dtype=_SYM, count=size // _SYM.itemsize, offset=off)
    typ = syms["info"] & 0xF
    keep = ((typ == STT_FUNC) | (typ == STT_GNU_IFUNC)) & (syms["value"] != 0)
    syms = syms[keep]
    order = np.argsort(syms["value"], kind="stable")
    syms = syms[order]
    stroff, strsize = secs[link][4], secs[link][5]
    strtab = data[stroff:stroff + strsize]
    return syms, strtab


def _name(strtab: bytes, i: int) -> str:
    end = strtab.find(b"\0", i)
    return strtab[i:end if end >= 0 else len(strtab)].decode(errors="replace")


def symbolize(items) -> dict:
    out = {}
    by_path: dict[str, list[int]] = {}
    for path, addr in items:
        by_path.setdefault(path, []).append(int(addr))
    for path, addrs in by_path.items():
        got = _read_symbols(path)
        if got is None:
            continue
        syms, strtab = got
        if len(syms) == 0:
            continue
        values = syms["value"].astype(np.int64)
        ends = values + np.maximum(syms["size"].astype(np.int64), 1)
        for a in set(addrs):
            q = a - 1 if a > 0 else a
            i = int(np.searchsorted(values, q, side="right")) - 1
            if i < 0:
                continue
            if q >= ends[i] and syms["size"][i] != 0:
                continue
            out[(path, a)] = _name(strtab, int(syms["name"][i]))
    return out
