"""``pyinterpose diff A B`` (issue 33 item 18) against what the programs know they allocated.

* simtrain with 6 and 8 layers: the peak delta is the difference of the peaks simtrain measured
  itself (its truth files); each step's allocations are its allocs_per_step; ``--fail-above``
  exits 1 above the true growth and 0 below it, on the peak and on a call site.
* tests/py/diff_workload.py, variants a and b: which call sites grew, appeared, vanished and
  stayed, by how many bytes, from the lines and sizes the workload printed.
* reserved: a reserved-view and a blocks-view trace of one real PyTorch program both say the
  max_memory_reserved PyTorch reported (samples/*.truth.json).
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import ROOT, gpu_trace, last_json_line, run_cli

WORKLOAD = os.path.join(ROOT, "tests", "py", "diff_workload.py")


@pytest.fixture(scope="module")
def layers(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    out = {}
    for n in (6, 8):
        path, truth = str(d / f"l{n}.pit"), str(d / f"l{n}.json")
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", path, "--", sys.executable, "-m",
                     "pyinterpose.examples.simtrain", "--steps", "5", "--layers", str(n), "--truth", truth)
        assert cp.returncode == 0, cp.stderr[-2000:]
        with open(truth) as fh:
            out[n] = (path, json.load(fh))
    return out


def test_peak_and_steps_against_simtrains_truth(layers):
    (a, ta), (b, tb) = layers[6], layers[8]
    cp = run_cli("diff", a, b, "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    pa, pb = ta["peaks"][0], tb["peaks"][0]
    assert pb > pa
    assert d["totals"]["peak"] == {"a": pa, "b": pb, "delta": pb - pa, "delta_pct": pytest.approx(100 * (pb - pa) / pa)}
    assert d["totals"]["allocated"]["delta"] == tb["bytes"] - ta["bytes"]
    assert d["totals"]["blocks"]["delta"] == tb["allocs"] - ta["allocs"]
    steps = [s for s in d["steps"] if s["a"] and s["b"]]
    assert len(steps) >= 3
    assert all(s["a"]["blocks"] == ta["allocs_per_step"] and s["b"]["blocks"] == tb["allocs_per_step"] for s in steps)
    # one call site (simtrain's loop): it grew by the peak's growth, and the sites sum to each peak
    grew = [r for r in d["call_sites"] if r["status"] == "grew"]
    assert len(grew) == 1 and grew[0]["delta"] == pb - pa
    assert sum(r["a"]["peak_live_bytes"] for r in d["call_sites"] if r["a"]) == pa
    assert sum(r["b"]["peak_live_bytes"] for r in d["call_sites"] if r["b"]) == pb
    assert sum(r["a"]["peak_live_bytes"] for r in d["classes"] if r["a"]) == pa


def test_fail_above_gates_on_the_true_growth(layers):
    (a, ta), (b, tb) = layers[6], layers[8]
    pct = 100 * (tb["peaks"][0] - ta["peaks"][0]) / ta["peaks"][0]
    above = run_cli("diff", a, b, "--fail-above", f"{pct - 0.5:.3f}")
    assert above.returncode == 1, above.stderr
    assert "FAIL: peak" in above.stdout
    below = run_cli("diff", a, b, "--fail-above", f"{pct + 0.5:.3f}")
    assert below.returncode == 0, below.stderr
    assert "ok: peak" in below.stdout
    assert run_cli("diff", b, a, "--fail-above", "0").returncode == 0      # B shrank: never fails
    site = json.loads(run_cli("diff", a, b, "--json").stdout)["call_sites"][0]["call_site"]  # "simtrain.py:N in f"
    file_line = site.split(" in ")[0]
    g = run_cli("diff", a, b, "--fail-above", f"{pct - 0.5:.3f}", "--metric", f"site:{file_line}", "--json")
    assert g.returncode == 1
    gj = json.loads(g.stdout)["gate"]
    assert gj["metric"] == f"site:{file_line}" and gj["exceeded"] and gj["delta"] == tb["peaks"][0] - ta["peaks"][0]
    assert "FAIL" in g.stderr


def test_bad_metric_is_a_one_line_error(layers):
    (a, _), (b, _) = layers[6], layers[8]
    for metric, words in (("bogus", "bad --metric"), ("site:nowhere.py:1", "no call site matches")):
        cp = run_cli("diff", a, b, "--fail-above", "5", "--metric", metric)
        assert cp.returncode == 2 and words in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
        assert len(cp.stderr.strip().splitlines()) == 1


def test_what_grew_appeared_and_vanished_by_line(capture, tmp_path):
    runs = {}
    for v in ("a", "b"):
        path, cp = capture([sys.executable, WORKLOAD, v], name=f"{v}.pit")
        assert cp.returncode == 0, cp.stderr
        runs[v] = (path, {x["tag"]: x for x in last_json_line(cp.stdout)["allocs"]})
    (a, ta), (b, tb) = runs["a"], runs["b"]
    cp = run_cli("diff", a, b, "--json")
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    rows = {r["call_site"]: r for r in d["call_sites"]}
    site = lambda t: f"diff_workload.py:{t['line']} in {t['function']}"    # noqa: E731
    for tag in ("weights", "acts", "scratch", "cache"):
        x = ta.get(tag) or tb[tag]
        r = rows[site(x)]
        va = ta[tag]["size"] if tag in ta else None
        vb = tb[tag]["size"] if tag in tb else None
        want = "appeared" if va is None else "vanished" if vb is None else \
            "grew" if vb > va else "shrank" if vb < va else "same"
        assert r["status"] == want, (tag, r)
        assert r["delta"] == (vb or 0) - (va or 0)
        assert (r["a"] or {}).get("peak_live_bytes") == va and (r["b"] or {}).get("peak_live_bytes") == vb
    assert d["call_site_counts"]["appeared"] == 1 and d["call_site_counts"]["vanished"] == 1
    text = run_cli("diff", a, b).stdout
    assert "appeared" in text and "vanished" in text and "grew" in text
    # a ctypes program: no framework allocator, so no reserve to gate on: one line, exit 2
    assert d["totals"]["reserved"]["a"] is None and d["totals"]["reserved"]["b"] is None
    cp = run_cli("diff", a, b, "--fail-above", "5", "--metric", "reserved")
    assert cp.returncode == 2 and "not known for A and B" in cp.stderr and "Traceback" not in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_reserved_of_both_views_is_pytorchs_max_memory_reserved():
    res, blk = gpu_trace("torch-cnn-reserved.pit"), gpu_trace("torch-cnn-blocks.pit")
    with open(gpu_trace("torch-cnn-reserved.truth.json")) as fh:
        want = json.load(fh)["pytorch_reported"]["max_memory_reserved"]
    cp = run_cli("diff", res, blk, "--json", "--metric", "reserved", "--fail-above", "0", timeout=900)
    assert cp.returncode == 0, cp.stderr
    t = json.loads(cp.stdout)["totals"]["reserved"]
    assert t["a"] == t["b"] == want
    assert t["source"] == {"a": "reserved view", "b": "simulated: pytorch"}


def _plain(p: dict) -> dict:
    """A profile with its steps (columns) as the list of step dicts, for json.dumps."""
    return {**p, "steps": [dict(s) for s in p["steps"]]}


def _profiles_both_ways(monkeypatch, path: str, rows: int | None = None) -> tuple[dict, dict]:
    """(the in-memory profile, the long-trace profile) of one trace, each from its own load; ``rows``:
    the long-trace profile's pieces hold that many rows (PYINTERPOSE_CHUNK_ROWS), and its sums go
    through np.unique (not by index), so that every piece boundary and merge is exercised."""
    import pyinterpose
    from pyinterpose.analysis import diff as D

    monkeypatch.setattr(D, "LEAN_BLOCKS", 10 ** 12)
    a = D.profile(pyinterpose.load(path), path)
    monkeypatch.setattr(D, "LEAN_BLOCKS", 0)
    if rows:
        monkeypatch.setenv("PYINTERPOSE_CHUNK_ROWS", str(4 * rows))      # piece_rows() = a quarter
        monkeypatch.setattr(D._Sums, "DENSE", 2)
    try:
        return a, D.profile(pyinterpose.load(path), path)
    finally:
        monkeypatch.delenv("PYINTERPOSE_CHUNK_ROWS", raising=False)
        monkeypatch.setattr(D._Sums, "DENSE", 1 << 20)


def _steps_by_hand(path: str) -> list[tuple[int, int]]:
    """(device allocations, bytes) per regular step of the main process, from the blocks table and the
    iterations' boundaries directly (the reference for the profiles' step columns)."""
    import numpy as np

    import pyinterpose
    from pyinterpose.analysis.iterations import find_iterations

    t = pyinterpose.load(path)
    it = find_iterations(t)
    b = t.blocks
    out = [(0, 0)] * int(it.count)
    rows = b[(b["pid"] == it.pid) & b["counts_device"]]
    for seq, size in zip(rows["seq_alloc"].tolist(), rows["size"].tolist()):
        k = int(np.searchsorted(np.asarray(it.boundaries), seq, side="right")) - 1
        if 0 <= k < it.count:
            out[k] = (out[k][0] + 1, out[k][1] + int(size))
    return out


def test_long_trace_profile_is_the_in_memory_one(layers, capture, monkeypatch):
    """issue 30: a long trace is profiled from its columns a piece of blocks at a time (no string per
    block, no copy of the blocks table, steps as columns); every table and figure equals the in-memory
    profile's, key for key and in order, on simtrain (steps, classes, one call site), the diff workload
    (python stacks: several call sites and owners) and the H100 samples — with one piece, and with
    pieces of 7 rows (every sum merged across pieces); the steps' allocations and bytes are also
    counted here by hand."""
    path, cp = capture([sys.executable, WORKLOAD, "a"], name="a.pit")
    assert cp.returncode == 0, cp.stderr
    paths = [layers[6][0], layers[8][0], path] + [gpu_trace(n) for n in (
        "torch-cnn-blocks.pit", "torch-transformer-blocks.pit", "jax-attn-blocks.pit", "torch-cnn-reserved.pit")]
    seen_sites = seen_owners = seen_steps = 0
    for p in paths:
        for rows in (None, 7):
            a, b = _profiles_both_ways(monkeypatch, p, rows)
            assert json.dumps(_plain(a)) == json.dumps(_plain(b)), (p, rows)
        assert [(s["blocks"], s["bytes"]) for s in a["steps"]] == _steps_by_hand(p), p
        seen_sites = max(seen_sites, len(a["call_sites"]))
        seen_owners = max(seen_owners, len(a["owners"]))
        seen_steps = max(seen_steps, len(a["steps"]))
    # the comparison covered several call sites, owners and steps (not only empty tables)
    assert seen_sites >= 3 and seen_owners >= 2 and seen_steps >= 3


def _step_pairs_by_hand(sa: list[dict], sb: list[dict]) -> list[dict]:
    out = []
    for i in range(max(len(sa), len(sb))):
        x = sa[i] if i < len(sa) else None
        y = sb[i] if i < len(sb) else None
        out.append({"step": i, "a": x, "b": y,
                    "delta": y["peak_live_bytes"] - x["peak_live_bytes"] if x and y else None})
    return out


def test_streamed_json_is_json_dumps_of_the_dict(layers, tmp_path):
    """issue 30: ``diff --json`` writes its steps array from the profiles' columns, in chunks; the output
    is byte for byte ``json.dumps`` of the whole object with the steps as a list of dicts (made here from
    the profiles, by hand), both ways round (A with fewer steps than B and the other way); chunks of
    two steps, with the other run's steps missing past its last, give the same array; the text output
    says how many steps it did not show."""
    import pyinterpose
    from pyinterpose.analysis import diff as D

    short = str(tmp_path / "short.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", short, "--", sys.executable, "-m",
                 "pyinterpose.examples.simtrain", "--steps", "3", "--layers", "6")
    assert cp.returncode == 0, cp.stderr
    for a, b in ((layers[8][0], short), (short, layers[6][0])):
        pa, pb = D.profile(pyinterpose.load(a), a), D.profile(pyinterpose.load(b), b)
        assert len(pa["steps"]) != len(pb["steps"]) and min(len(pa["steps"]), len(pb["steps"])) >= 1
        steps = _step_pairs_by_hand([dict(s) for s in pa["steps"]], [dict(s) for s in pb["steps"]])
        want = {**D.diff(pa, pb), "steps": steps, "gate": None, "complete": True}
        cp = run_cli("diff", a, b, "--json")
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout == json.dumps(want, separators=(",", ":")) + "\n"
        assert "".join(D.StepPairs(pa["steps"], pb["steps"]).json_chunks(rows=2)) == \
            json.dumps(steps, separators=(",", ":"))
        assert list(D.diff(pa, pb)["steps"]) == steps
        text = run_cli("diff", a, b, "--top", "2").stdout
        assert f"... {len(steps) - 2} more steps" in text


def test_reserved_peak_without_the_curve_is_the_curves_maximum(layers):
    """issue 30: diff reads the simulated reserve's peak from one replay without its curve
    (pools.peak_reserved); it is the maximum of the curve the report draws (reserved_curve), for each
    simulated allocator, on simtrain and the H100 samples."""
    import numpy as np

    import pyinterpose
    from pyinterpose.analysis.pools import peak_reserved, reserved_curve

    seen = set()
    for p in (layers[6][0], gpu_trace("torch-cnn-blocks.pit"), gpu_trace("jax-attn-blocks.pit")):
        for alloc in ("pytorch", "bfc", "cudamalloc", "cnmem"):
            want = int(np.asarray(reserved_curve(pyinterpose.load(p), alloc)["bytes"]).max())
            assert peak_reserved(pyinterpose.load(p), alloc) == want, (p, alloc)
            seen.add(want)
    assert len(seen) >= 3 and min(seen) > 0
