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


def _profiles_both_ways(monkeypatch, path: str) -> tuple[dict, dict]:
    """(the in-memory profile, the long-trace profile) of one trace, each from its own load."""
    import pyinterpose
    from pyinterpose.analysis import diff as D

    monkeypatch.setattr(D, "LEAN_BLOCKS", 10 ** 12)
    a = D.profile(pyinterpose.load(path), path)
    monkeypatch.setattr(D, "LEAN_BLOCKS", 0)
    return a, D.profile(pyinterpose.load(path), path)


def test_long_trace_profile_is_the_in_memory_one(layers, capture, monkeypatch):
    """issue 30: a long trace is profiled from its columns by codes (no string per block, no copy of the
    blocks table); every table and figure equals the in-memory profile's, key for key and in order, on
    simtrain (steps, classes, one call site), the diff workload (python stacks: several call sites and
    owners) and the H100 samples."""
    path, cp = capture([sys.executable, WORKLOAD, "a"], name="a.pit")
    assert cp.returncode == 0, cp.stderr
    paths = [layers[6][0], layers[8][0], path] + [gpu_trace(n) for n in (
        "torch-cnn-blocks.pit", "torch-transformer-blocks.pit", "jax-attn-blocks.pit", "torch-cnn-reserved.pit")]
    seen_sites = seen_owners = seen_steps = 0
    for p in paths:
        a, b = _profiles_both_ways(monkeypatch, p)
        assert json.dumps(a) == json.dumps(b), p
        seen_sites = max(seen_sites, len(a["call_sites"]))
        seen_owners = max(seen_owners, len(a["owners"]))
        seen_steps = max(seen_steps, len(a["steps"]))
    # the comparison covered several call sites, owners and steps (not only empty tables)
    assert seen_sites >= 3 and seen_owners >= 2 and seen_steps >= 3
