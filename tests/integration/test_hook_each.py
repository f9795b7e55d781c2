"""One test per native/shim/hooks.def entry: tests/c/hook_each.c calls every hooked function once on simcuda,
between two markers named after it, and says which record that call must leave (the op, the address it got or
passed, the size, the stream, the block kind, the device, the blocks its ACCESS records name).  Each test reads
that record back from the raw trace, so a wrapper that records nothing (or records the wrong thing) fails its
own test.  The hooks that write no record of their own (device and context switches, unloads) are checked by
the record of a probe call right after them, which shows their effect.

Independent of the shim's reader: the records' layout and the enum values are parsed here from events.h, the
hook names from hooks.def, and the trace's records are taken raw (``read_file``), strings decoded here."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from pyinterpose.trace.reader import read_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "native", "shim")


def _hooks() -> list[str]:
    with open(os.path.join(SHIM, "hooks.def")) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    return re.findall(r"^HOOK\((\w+),", text, flags=re.M)


def _enums() -> dict[str, int]:
    """Every NAME = value of events.h's enums (plain integer literals)."""
    with open(os.path.join(SHIM, "events.h")) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    out = {}
    for body in re.findall(r"enum\s+\w+\s*\{(.*?)\}", text, flags=re.S):
        nxt = 0
        for item in (x.strip() for x in body.split(",")):
            if item:
                m = re.fullmatch(r"(\w+)\s*(?:=\s*(-?\d+))?", item)
                nxt = int(m.group(2)) if m.group(2) else nxt
                out[m.group(1)] = nxt
                nxt += 1
    return out


HOOKS = _hooks()
ENUM = _enums()
# the record, as events.h lays it out (64 bytes)
EVENT = np.dtype([("t_ns", "<u8"), ("seq", "<u8"), ("addr", "<u8"), ("size", "<u8"), ("stream", "<u8"),
                  ("aux", "<u8"), ("tid", "<u4"), ("op", "<u2"), ("api", "<u2"), ("result", "<i4"),
                  ("device", "<i2"), ("flags", "<u2")])


def _strings(ev: np.ndarray) -> dict[int, str]:
    """STRING records (aux: id, size: length), each followed by its STRDATA records (32 bytes at 16..47)."""
    out = {}
    raw = ev.view(np.uint8).reshape(len(ev), 64)
    for i in np.flatnonzero(ev["op"] == ENUM["PI_OP_STRING"]):
        n = int(ev["size"][i])
        k = (n + 31) // 32
        assert (ev["op"][i + 1:i + 1 + k] == ENUM["PI_OP_STRDATA"]).all()
        out[int(ev["aux"][i])] = bytes(raw[i + 1:i + 1 + k, 16:48].reshape(-1)[:n]).decode()
    return out


@pytest.fixture(scope="module")
def run(cbuild, tmp_path_factory):
    """Capture hook_each once: (expected record per hook, records per pid, the windows per pid)."""
    from conftest import run_cli

    prog = cbuild("hook_each")
    out = str(tmp_path_factory.mktemp("hook_each") / "t.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", prog,
                 env={"SIMCUDA_DEVICES": "2", "PYINTERPOSE_GPU_CLOCK": "off"}, timeout=300)
    assert cp.returncode == 0, cp.stderr
    expect = {}
    for d in (json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")):
        assert d["hook"] not in expect, d["hook"]
        expect[d["hook"]] = d
    raw = read_file(out)
    records, windows = {}, {}
    for pid, parts in raw.events.items():
        ev = np.concatenate(parts).view(EVENT)
        ev = ev[np.argsort(ev["seq"], kind="stable")]
        strings = _strings(ev)
        marks = np.flatnonzero(ev["op"] == ENUM["PI_OP_MARKER"])
        bounds = list(marks) + [len(ev)]
        windows[pid] = {strings[int(ev["aux"][m])]: (int(m), int(bounds[k + 1])) for k, m in enumerate(marks)}
        records[pid] = ev
    return expect, records, windows


def test_the_driver_names_every_hook_once(run):
    """hook_each.c has a case for every hooks.def entry (a new hook without one fails here)."""
    expect, _, _ = run
    assert sorted(expect) == sorted(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_records_its_call(run, hook):
    expect, records, windows = run
    e = expect.get(hook)
    assert e is not None, f"tests/c/hook_each.c has no case for {hook}"
    ev = records[e["pid"]]
    assert hook in windows[e["pid"]], f"no marker {hook!r} in process {e['pid']}'s records"
    lo, hi = windows[e["pid"]][hook]
    w = ev[lo + 1:hi]
    api = HOOKS.index(e["api"]) + 1                    # API ids: hooks.def line order, from 1
    op = ENUM["PI_OP_" + e["op"]]
    hit = np.flatnonzero((w["api"] == api) & (w["op"] == op))
    assert len(hit) == 1, (f"{hook}: {len(hit)} {e['op']} records by {e['api']} between its markers "
                           f"(ops there: {sorted(set(zip(w['api'].tolist(), w['op'].tolist())))})")
    r = w[hit[0]]
    assert int(r["result"]) == 0
    got = {f: int(r[f]) for f in ("addr", "size", "stream", "aux", "device")}
    want = {f: e[f] for f in ("addr", "size", "stream", "aux", "device") if f in e}
    assert {f: got[f] for f in want} == want, hook
    # flags: the block kind (ALLOC, FREE), the graph event (GRAPH_DEF), else 0
    want_flags = ENUM["PI_KIND_" + e["kind"]] if "kind" in e else ENUM[e["flags"]] if "flags" in e else 0
    assert int(r["flags"]) == want_flags, hook
    # the ACCESS records that follow it in the same reservation: the blocks the call named (none for
    # anything but a launch, copy, memset or TMA descriptor)
    i = lo + 1 + int(hit[0]) + 1
    acc = []
    while i < hi and ev["op"][i] == ENUM["PI_OP_ACCESS"] and ev["seq"][i] == r["seq"] + 1 + len(acc):
        acc.append(int(ev["addr"][i]))
        i += 1
    assert sorted(acc) == sorted(e["acc"]), hook
