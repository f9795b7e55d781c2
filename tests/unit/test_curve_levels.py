"""The timeline's multi-resolution summary of the memory curve (report/curve_levels.py,
report/timeline_summary.py) against references written here: brute-force min/max per bucket, and
the live-bytes curve rebuilt from the blocks table."""
from __future__ import annotations

import base64
import gzip

import numpy as np
import pytest

from pyinterpose.report import curve_levels, timeline
from pyinterpose.report.synthetic import training_trace


def ref_sizes(n, tile, factor, max_levels):
    """Buckets per level, from the documented rule: tile * factor**l buckets while no more than n."""
    out = []
    b = tile
    while len(out) < max_levels and b <= n:
        out.append(b)
        b *= factor
    return out or ([n] if n else [])


def ref_level(values, buckets):
    """min, max and first index of each bucket, one bucket at a time (plain Python)."""
    n = len(values)
    lo, hi, first = [], [], []
    for j in range(buckets):
        s, e = j * n // buckets, (j + 1) * n // buckets
        seg = [int(x) for x in values[s:e]]
        lo.append(min(seg))
        hi.append(max(seg))
        first.append(s)
    return lo, hi, first


def unpack(spec):
    """A packed array (gzip, base64, a base and deltas) decoded here with the standard library and numpy."""
    raw = gzip.decompress(base64.b64decode(spec["b64"]))
    d = np.frombuffer(raw, dtype="<i4" if spec["dtype"] == "int32" else "<f8")
    assert len(d) == spec["n"]
    return [spec["base"] + int(x) for x in np.cumsum(d.astype(np.int64))]


@pytest.mark.parametrize("n", [1, 5, 16, 17, 63, 64, 65, 1000, 4096, 5000, 33333])
def test_levels_match_brute_force(n):
    rng = np.random.default_rng(n)
    # a memory-like walk: big steps up and down, never negative
    v = np.cumsum(rng.integers(-(1 << 30), 1 << 30, n)).astype(np.int64)
    v -= v.min()
    t = np.cumsum(rng.integers(0, 5000, n)).astype(np.int64)
    tile, factor, ml = 16, 4, 4
    lv = curve_levels.levels(v, t, tile=tile, factor=factor, max_levels=ml)
    sizes = ref_sizes(n, tile, factor, ml)
    assert [len(x["lo"]) for x in lv] == sizes
    for level, b in zip(lv, sizes):
        lo, hi, first = ref_level(v, b)
        assert level["lo"].tolist() == lo
        assert level["hi"].tolist() == hi
        assert level["t"].tolist() == [int(t[i]) for i in first]
        # every bucket's min/max bound the true curve over its events, and both are reached
        bucket = np.repeat(np.arange(b), np.diff([j * n // b for j in range(b + 1)]))
        assert len(bucket) == n
        assert (level["lo"][bucket] <= v).all() and (v <= level["hi"][bucket]).all()
        for j in range(b):
            seg = v[bucket == j]
            assert level["lo"][j] in seg and level["hi"][j] in seg
    # each coarser bucket is exactly `factor` buckets of the level below
    for k in range(len(sizes) - 1):
        e0 = [j * n // sizes[k] for j in range(sizes[k] + 1)]
        e1 = [j * n // sizes[k + 1] for j in range(sizes[k + 1] + 1)]
        assert set(e0) <= set(e1)


def test_default_levels_on_a_long_curve():
    """The default pyramid (2 048 .. 1 048 576 buckets) on 3 * 2**20 values: buckets of exactly
    3, 24, 192 and 1536 values, checked by reshaping."""
    rng = np.random.default_rng(7)
    n = 3 * (1 << 20)
    v = rng.integers(0, 1 << 40, n).astype(np.int64)
    lv = curve_levels.levels(v)
    assert [len(x["lo"]) for x in lv] == [2048, 16384, 131072, 1048576]
    for level in lv:
        w = n // len(level["lo"])
        assert np.array_equal(level["lo"], v.reshape(-1, w).min(axis=1))
        assert np.array_equal(level["hi"], v.reshape(-1, w).max(axis=1))


@pytest.mark.parametrize("big", [False, True])
def test_tiles_decode_to_the_levels(big):
    rng = np.random.default_rng(3)
    v = np.cumsum(rng.integers(-(1 << 20), 1 << 20, 5000)).astype(np.int64) + (1 << 34)
    if big:
        v[100] += 1 << 45            # a delta past 32 bits: the float64 encoding
    t = np.arange(5000, dtype=np.int64) * 977
    lv = curve_levels.levels(v, t, tile=64, factor=4, max_levels=3)
    for level in lv:
        tiles = curve_levels.pack_level(level, tile=64)
        assert len(tiles) == -(-len(level["lo"]) // 64)
        for k in ("lo", "hi", "t"):
            got = [x for tl in tiles for x in unpack(tl[k])]
            assert got == level[k].tolist()
        # values past 32 bits (here 2**34) still take int32 deltas; only a jump past 2**31 takes float64
        assert any(tl["hi"]["dtype"] == "float64" for tl in tiles) == big


def ref_curve(tr, device=0):
    """Live device bytes after every allocation and free (frees first at one instant), from the table."""
    b = tr.blocks
    b = b[(b["device"] == device) & b["counts_device"]]
    ev = []
    for r in b.itertuples():
        size = int(r.device_bytes) if "device_bytes" in b.columns else int(r.size)
        ev.append((int(r.t_alloc), 1, size))
        if r.freed:
            ev.append((int(r.t_free), 0, -size))
    ev.sort(key=lambda e: (e[0], e[1]))
    out, acc = [], 0
    for _, _, d in ev:
        acc += d
        out.append(acc)
    return np.array(out, np.int64), np.array([e[0] for e in ev], np.int64)


def test_summary_payload_against_the_blocks(monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_TIMELINE_EXACT_MAX", "100")
    tr = training_trace(iterations=1500)
    curve, times = ref_curve(tr)
    p = timeline.payload(tr, 0)
    assert "summary" in p and "arrays" not in p
    n = len(curve)
    assert p["events"] == n
    assert p["stats"]["peak_bytes"] == int(curve.max())
    assert p["stats"]["end_bytes"] == int(curve[-1])
    s = p["summary"]
    assert s["buckets"] == ref_sizes(n, 2048, 8, 4)
    for tiles, b in zip(s["levels"], s["buckets"]):
        lo, hi, first = ref_level(curve, b)
        assert [x for tl in tiles for x in unpack(tl["lo"])] == lo
        assert [x for tl in tiles for x in unpack(tl["hi"])] == hi
        assert [x + p["t0_ns"] for tl in tiles for x in unpack(tl["t"])] == [int(times[i]) for i in first]
    # the stretches stored event by event: the steady iteration and around the peak
    assert len(s["exact"]) == 2
    assert [s["exact"][0]["e0"], s["exact"][0]["e1"]] == p["steady"]
    pk = int(np.argmax(curve))
    assert s["exact"][1]["e0"] <= pk <= s["exact"][1]["e1"]
    for w in s["exact"]:
        assert unpack(w["v"]) == curve[w["e0"]:w["e1"] + 1].tolist()
        assert [x + p["t0_ns"] for x in unpack(w["t"])] == times[w["e0"]:w["e1"] + 1].tolist()
    # the page says what was summarised
    frag = timeline.fragment(p, 0)
    assert f"{n:,} points" in frag and "min/max per bucket" in frag
    assert frag.count('class="pit-tl-level"') == 0          # the finer levels go at the end of the page
    assert timeline.deferred(p, 0).count('class="pit-tl-level"') == len(s["buckets"]) - 1


def test_small_traces_keep_the_exact_timeline():
    tr = training_trace(iterations=20)
    p = timeline.payload(tr, 0)
    assert "arrays" in p and "summary" not in p


def test_summary_payload_orders_frees_first_at_one_instant(monkeypatch):
    """Times rounded to 5 us: frees and allocations share instants; frees count first (the curve's
    rule), so the summary's peak and buckets are the reference's."""
    monkeypatch.setenv("PYINTERPOSE_TIMELINE_EXACT_MAX", "100")
    tr = training_trace(iterations=300)
    b = tr.blocks
    for c in ("t_alloc", "t_free"):
        b[c] = (b[c].to_numpy() // 5000) * 5000
    curve, times = ref_curve(tr)
    assert len(np.unique(times)) < len(times) // 2
    p = timeline.payload(tr, 0)
    assert p["stats"]["peak_bytes"] == int(curve.max())
    for tiles, bk in zip(p["summary"]["levels"], p["summary"]["buckets"]):
        lo, hi, _ = ref_level(curve, bk)
        assert [x for tl in tiles for x in unpack(tl["lo"])] == lo
        assert [x for tl in tiles for x in unpack(tl["hi"])] == hi


def test_a_long_step_line_keeps_its_peak_per_bucket(monkeypatch):
    """NVML / reserved lines with more change points than LINE_MAX_POINTS: each point drawn is the line's
    greatest value from there to the next point drawn (the line is a step function: y[i] from x[i] on)."""
    from pyinterpose.report import timeline_summary

    monkeypatch.setattr(timeline_summary, "LINE_MAX_POINTS", 100)
    rng = np.random.default_rng(5)
    n = 40000                                    # events: levels of 2,048 and 16,384 buckets
    x = np.sort(rng.uniform(-0.5, n - 0.5, 3000))
    x[:5] = np.sort(rng.uniform(-0.5, 3, 5))
    y = rng.integers(0, 1 << 40, len(x)).astype(np.int64)
    out = timeline_summary._line(x, y, n)
    xs, ys = np.array(out["x"]), np.array(out["y"])
    assert 100 < len(xs) < len(x) and np.all(np.diff(xs) > 0)
    assert xs[0] == round(float(x[0]), 2)
    for k in range(len(xs)):
        a, b = xs[k], (xs[k + 1] if k + 1 < len(xs) else np.inf)
        # the line's values over [a, b): the one carried into a (the last change at or before a), and
        # every change inside
        vals = [int(v) for xi, v in zip(x, y) if a <= xi < b]
        before = [int(v) for xi, v in zip(x, y) if xi <= a]
        if before:
            vals.append(before[-1])
        assert ys[k] == max(vals), k


def test_device_curve_rows_out_of_time_order():
    """Rows not in allocation order and times rounded (ties): the curve, its times and each block's
    allocation/free event are those of one stable sort by (time, free before allocation), row order
    breaking ties: the reference sorts the events of the rows as given."""
    from pyinterpose.report.timeline_summary import device_curve

    tr = training_trace(iterations=200)
    b = tr.blocks[tr.blocks["counts_device"]].sample(frac=1.0, random_state=3).copy()
    for c in ("t_alloc", "t_free"):
        b[c] = (b[c].to_numpy() // 3000) * 3000
    ev = []
    for k, r in enumerate(b.itertuples()):
        ev.append((int(r.t_alloc), 1, int(r.size), k))
        if r.freed:
            ev.append((int(r.t_free), 0, -int(r.size), k))
    # frees of all rows (row order) then allocations (row order), sorted stably by (time, kind)
    ev = sorted([e for e in ev if e[1] == 0] + [e for e in ev if e[1] == 1], key=lambda e: (e[0], e[1]))
    t, total, a_ev, f_ev = device_curve(tr, b, with_events=True)
    assert t.tolist() == [e[0] for e in ev]
    assert total.tolist() == np.cumsum([e[2] for e in ev]).tolist()
    a_ref = {e[3]: i for i, e in enumerate(ev) if e[1] == 1}
    # a block freed at the instant of its allocation: its free sorts first; its free event is put
    # at its allocation (lifetime 0), as the exact payload does
    f_ref = {e[3]: max(i, a_ref[e[3]]) for i, e in enumerate(ev) if e[1] == 0}
    assert a_ev.tolist() == [a_ref[k] for k in range(len(b))]
    assert f_ev.tolist() == [f_ref.get(k, -1) for k in range(len(b))]


def test_summary_payload_of_a_device_with_a_host_block(monkeypatch):
    """A block not counted on the device (pinned host memory) among the device's: the summary's curve is
    that of the counted blocks only, read a column at a time (MaskedRows, not a copy of every column)."""
    monkeypatch.setenv("PYINTERPOSE_TIMELINE_EXACT_MAX", "100")
    tr = training_trace(iterations=300)
    b = tr.blocks
    cd = b["counts_device"].to_numpy(bool).copy()
    big = int(np.argmax(np.where(cd, b["size"].to_numpy(np.int64), -1)))
    cd[big] = False                                # the largest block: the peak moves without it
    b["counts_device"] = cd
    curve, times = ref_curve(tr)
    p = timeline.payload(tr, 0)
    assert p["events"] == len(curve) and p["blocks"] == int(cd.sum())
    assert p["stats"]["peak_bytes"] == int(curve.max())
    assert p["stats"]["end_bytes"] == int(curve[-1])
    for tiles, bk in zip(p["summary"]["levels"], p["summary"]["buckets"]):
        lo, hi, first = ref_level(curve, bk)
        assert [x for tl in tiles for x in unpack(tl["lo"])] == lo
        assert [x for tl in tiles for x in unpack(tl["hi"])] == hi
        assert [x + p["t0_ns"] for tl in tiles for x in unpack(tl["t"])] == [int(times[i]) for i in first]


def test_masked_rows_read_as_the_table_rows():
    from pyinterpose.report.timeline_summary import MaskedRows

    tr = training_trace(iterations=20)
    b = tr.blocks
    mask = np.random.default_rng(1).random(len(b)) < 0.7
    rows = MaskedRows(b, mask, ["t_alloc", "size", "freed", "nope"])
    assert len(rows) == int(mask.sum())
    assert "size" in rows and "nope" not in rows and "pid" not in rows
    for c in ("t_alloc", "size", "freed"):
        assert rows[c].to_numpy().tolist() == b.loc[mask, c].to_numpy().tolist()
    with pytest.raises(KeyError):
        rows["pid"]
