"""The drain's windows (pyinterpose/capture/window.py) on synthetic records: what reaches the trace does not
depend on how the ring's records were cut into batches, the snapshot at a window's start is the live set a
plain replay of the records gives (a reference written here), and the per-step history stays bounded."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose.trace import records
from pyinterpose.capture.window import HISTORY_ROWS, History, Windows

O = records.OP
DT = records.event_dtype()


def _program(steps=40, seed=1, window=(10, 25), leak_every=7):
    """Records of a loop: per step a marker, three allocations (each with its SITE) freed in the step, a
    launch, and every leak_every steps one allocation never freed; cudaProfilerStart/Stop at the given
    steps (right after their markers)."""
    rng = np.random.default_rng(seed)
    recs = []
    seq = [0]
    addr = [0x10000]

    def put(op, **kw):
        seq[0] += 1
        r = np.zeros(1, DT)[0]
        r["seq"], r["t_ns"], r["op"] = seq[0], 1000 * seq[0], op
        for k, v in kw.items():
            r[k] = v
        recs.append(r)
        return r

    def alloc(size, site):
        addr[0] += 0x100000
        put(O.ALLOC, addr=addr[0], size=size, flags=1)
        put(O.SITE, addr=0x400000 + site, stream=0, aux=site)
        return addr[0]

    w0 = alloc(1 << 20, 1)             # a weight, before the first step
    for s in range(steps):
        put(O.MARKER, aux=1)
        if s == window[0]:
            put(O.WINDOW, flags=1, aux=1)
        if s == window[1]:
            put(O.WINDOW, flags=2, aux=1)
        held = [alloc(int(rng.integers(1, 8)) << 16, 2 + k) for k in range(3)]
        put(O.LAUNCH, addr=0xABC, aux=3)
        for a in reversed(held):
            put(O.FREE, addr=a, flags=1)
        if s % leak_every == leak_every - 1:
            alloc(4096, 9)
    put(O.FREE, addr=w0, flags=1)
    return np.array(recs, dtype=DT)


def _feed(windows, recs, cuts):
    out = []
    for a, b in zip([0] + cuts, cuts + [len(recs)]):
        out += windows.feed(7, recs[a:b].copy())
    return np.concatenate(out) if out else np.zeros(0, DT)


def _reference_live(recs, upto_seq):
    """Blocks live (address -> (size, its ALLOC seq)) just before record seq ``upto_seq``: a plain replay."""
    live = {}
    for r in recs:
        if r["seq"] >= upto_seq:
            break
        if r["op"] == O.ALLOC:
            live[int(r["addr"])] = (int(r["size"]), int(r["seq"]))
        elif r["op"] == O.FREE:
            live.pop(int(r["addr"]), None)
    return live


@pytest.mark.parametrize("mode", ["cudaProfilerApi", "steps", "flight"])
def test_batches_do_not_change_the_trace(mode):
    recs = _program()
    rng = np.random.default_rng(3)

    def make():
        if mode == "flight":
            return Windows("flight", flight_steps=6)
        if mode == "steps":
            return Windows("range", range="steps", steps=(10, 25))
        return Windows("range", range=mode)

    outs = []
    for trial in range(6):
        w = make()
        cuts = sorted(set(rng.integers(1, len(recs), size=trial * 7).tolist())) if trial else []
        got = _feed(w, recs, cuts)
        if mode == "flight":
            class W:
                def __init__(self):
                    self.parts = []

                def events(self, pid, a):
                    self.parts.append(a.copy())

                def window(self, info):
                    self.info = info

                def history(self, h):
                    self.h = h
            sink = W()
            w.dump(sink, DT)
            got = np.concatenate(sink.parts)
        outs.append((got.tobytes(), w.procs[7].history.to_json()))
    assert all(o == outs[0] for o in outs[1:])


def test_the_snapshot_is_the_live_set_at_the_start():
    recs = _program()
    w = Windows("range", range="cudaProfilerApi")
    got = _feed(w, recs, [17, 300, 301, 555])
    start = int(recs["seq"][recs["op"] == O.WINDOW][0])
    want = _reference_live(recs, start)
    # the snapshot: ALLOC records (with their SITEs) of earlier sequence numbers, right at the front
    snap = got[(got["seq"] < start) & (got["op"] == O.ALLOC)]
    assert {int(r["addr"]): (int(r["size"]), int(r["seq"])) for r in snap} == want
    assert len(got[(got["seq"] < start) & (got["op"] == O.SITE)]) == len(want)
    # inside the window everything; outside only the frees of blocks the trace holds
    stop = int(recs["seq"][recs["op"] == O.WINDOW][1])
    inside = recs[(recs["seq"] > start) & (recs["seq"] < stop)]
    assert np.isin(inside["seq"], got["seq"]).all()
    after = got[got["seq"] > stop]
    assert set(after["op"].tolist()) <= {O.FREE}
    held_after = _reference_live(recs, stop)
    assert sorted(after["addr"].tolist()) == sorted(a for a in held_after if a in
                                                    {int(x) for x in recs["addr"][recs["seq"] > stop]})
    info = w.side_tables()[0]["processes"][0]["windows"][0]
    assert info["start_step"] == 10 and info["last_step"] == 24
    assert info["live_at_start"] == sum(s for s, _ in want.values())


def test_flight_recorder_keeps_the_last_steps_and_their_start():
    recs = _program(steps=40)
    w = Windows("flight", flight_steps=5)
    _feed(w, recs, [100, 101, 900])
    arrays, win = w.procs[7].flight_records(DT)
    got = np.concatenate(arrays)
    markers = recs["seq"][recs["op"] == O.MARKER]
    first_kept = int(markers[-5])
    assert (got["op"] == O.MARKER).sum() == 5
    want = _reference_live(recs, first_kept)
    snap = got[(got["seq"] < first_kept) & (got["op"] == O.ALLOC)]
    assert {int(r["addr"]): (int(r["size"]), int(r["seq"])) for r in snap} == want
    assert win["start_step"] == 35 and win["live_at_start"] == sum(s for s, _ in want.values())


def test_history_is_bounded_and_keeps_peaks():
    h = History()
    peaks = []
    live = 0
    for s in range(3 * HISTORY_ROWS + 5):
        h.begin(s, s, live)
        p = live + (s % 13) * 100
        h.note_alloc((s % 13) * 100, p)
        peaks.append(p)
        live += 10
        h.end_step(s + 1, live, live, {0: live}, {0: live}, {0}, {0})
    j = h.to_json()
    assert len(j["rows"]) < HISTORY_ROWS and j["span"] == 4
    steps = sum(r[1] for r in j["rows"])
    assert steps == len(j["rows"]) * j["span"]
    assert max(r[7] for r in j["rows"]) == max(peaks[:steps])
    for r in j["rows"]:        # each row's peak is its steps' highest, its end the last step's
        assert r[7] == max(peaks[r[0]:r[0] + r[1]])
        assert r[5] == 10 * (r[0] + r[1])


def test_a_signal_window_opens_at_the_first_record_after_the_signal():
    recs = _program(steps=100, window=(999, 999))       # no profiler records
    t = recs["t_ns"]
    t_on, t_off = int(t[400]) - 1, int(t[900]) + 1      # between records 399/400 and 900/901
    w = Windows("range", range="signal")
    got = []
    got += w.feed(7, recs[:350].copy())                 # the drain is behind: the signal comes later
    w.toggle(t_on)
    got += w.feed(7, recs[350:380].copy())               # records before the signal: still outside
    got += w.feed(7, recs[380:700].copy())
    w.toggle(t_off)
    got += w.feed(7, recs[700:].copy())
    got = np.concatenate(got)
    inside = recs[400:901]
    assert np.isin(inside["seq"], got["seq"]).all()
    outside = np.concatenate([recs[:400], recs[901:]])
    leaked_in = outside[np.isin(outside["seq"], got["seq"])]
    # outside: only the definitions, the snapshot (earlier ALLOC/SITE) and frees of blocks the trace holds
    assert set(leaked_in[leaked_in["seq"] > int(recs["seq"][900])]["op"].tolist()) <= {O.FREE}
    assert not np.isin(recs[350:400]["seq"][recs[350:400]["op"] == O.LAUNCH], got["seq"]).any()
    info = w.side_tables()[0]["processes"][0]["windows"][0]
    assert (info["start_ns"], info["end_ns"]) == (int(t[400]), int(t[901]))


def test_a_signal_window_opened_at_a_marker_starts_with_that_markers_step():
    """The first record after the signal is a step's marker (the signal landed between the last op of step S
    and the marker of step S+1): the window holds nothing of step S, so its first step is S+1, as a window
    opened on a marker by --capture-range steps says (seen in CI: the window's steps were numbered one low,
    so step S+1's leak was compared with the full capture's step S)."""
    recs = _program(steps=100, window=(999, 999))
    marks = np.flatnonzero(recs["op"] == O.MARKER)
    for s, k in ((30, int(marks[30])), (31, int(marks[31]) + 1)):   # on step 30's marker; just after 31's
        w = Windows("range", range="signal")
        w.toggle(int(recs["t_ns"][k]) - 1)
        got = np.concatenate(w.feed(7, recs.copy()))
        info = w.side_tables()[0]["processes"][0]["windows"][0]
        assert info["start_ns"] == int(recs["t_ns"][k])
        assert info["start_step"] == s
        # the trace's first marker is the first step's when the window opened on it, the next one's otherwise
        first_marker = int(got["seq"][got["op"] == O.MARKER][0])
        assert first_marker == int(recs["seq"][marks[s if k == marks[s] else s + 1]])
