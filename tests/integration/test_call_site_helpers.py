"""Call sites group by the first frame outside allocation helpers (issue 24 item 4), on simcuda.
Ground truth: tests/py/helper_workload.py knows which caller allocated which sizes, on which line."""
from __future__ import annotations

import json

import pytest

import pyinterpose
from conftest import ROOT, last_json_line, run_cli
from pyinterpose.trace import stacks as S

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

WORKLOAD = f"{ROOT}/tests/py/helper_workload.py"


@pytest.fixture(scope="module")
def traces(tmp_path_factory, native):
    d = tmp_path_factory.mktemp("helpers")
    out = {}
    for mode in ("helper", "nested", "direct"):
        path = str(d / f"{mode}.pit")
        cp = run_cli("run", "-q", "--simulated-gpu", "--stacks", "python", "-o", path, "--", "python",
                     WORKLOAD, mode)
        assert cp.returncode == 0, cp.stderr[-2000:]
        out[mode] = (path, last_json_line(cp.stdout))
    return out


def _summary(path, *opts):
    cp = run_cli("summary", path, "--json", *opts)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return json.loads(cp.stdout)["call_sites"]


def _site(caller, truth, suffix=""):
    return f"helper_workload.py:{truth['lines'][caller + suffix]} in {caller}"


@pytest.mark.parametrize("mode", ["helper", "nested"])
def test_sites_are_the_helpers_callers(traces, mode):
    path, truth = traces[mode]
    sites = _summary(path)
    helper_lines = [truth["lines"]["helper"]] if mode == "helper" else [truth["lines"]["helper_nested"],
                                                                        truth["lines"]["raw"]]
    assert sorted(sites["helpers"]) == sorted(
        f"helper_workload.py:{n} in {'_raw_malloc' if n == truth['lines'].get('raw') else 'cuda_malloc'}"
        for n in helper_lines)
    assert sites["site_skip"] == "auto"
    got = {r["call_site"]: r for r in sites["by_count"]}
    assert set(got) == {_site(c, truth) for c in truth["callers"]}
    for caller, sizes in truth["callers"].items():
        r = got[_site(caller, truth)]
        assert r["blocks"] == len(sizes) and r["bytes"] == sum(sizes)
        # each site's own stack: the helper frame(s) innermost, then the caller's line
        assert r["frames"][len(helper_lines)] == _site(caller, truth)
    assert len({tuple(r["frames"]) for r in sites["by_count"]}) == 3


def test_each_block_keeps_its_own_stack(traces):
    path, truth = traces["helper"]
    tr = pyinterpose.load(path)
    b = tr.blocks
    for caller, sizes in truth["callers"].items():
        for size in sizes:
            (sid,) = b.loc[b["size"] == size, "stack_id"].tolist()
            fr = S.frames_of(tr, int(sid))
            assert (fr[0]["function"], fr[0]["line"]) == ("cuda_malloc", truth["lines"]["helper"])
            assert (fr[1]["function"], fr[1]["line"]) == (caller, truth["lines"][caller])
            assert S.call_site(tr, int(sid)) == _site(caller, truth)


def test_no_helper_no_skipping(traces):
    path, truth = traces["direct"]
    sites = _summary(path)
    assert sites["helpers"] == []
    assert {r["call_site"] for r in sites["by_count"]} == {
        f"helper_workload.py:{truth['lines'][c + '_direct']} in {c}" for c in truth["callers"]}


def test_site_skip_overrides(traces):
    path, truth = traces["helper"]
    sites = _summary(path, "--site-skip", "none")            # the innermost frame: one site
    assert [r["call_site"] for r in sites["by_count"]] == [
        f"helper_workload.py:{truth['lines']['helper']} in cuda_malloc"]
    assert sites["by_count"][0]["blocks"] == 15 and sites["helpers"] == []
    sites = _summary(path, "--site-skip", "cuda_malloc", "--site-skip", "encoder")
    assert {r["call_site"] for r in sites["by_count"]} == {
        _site("decoder", truth), _site("head", truth), f"helper_workload.py:{truth['lines']['main_encoder']} in <module>"}
    text = run_cli("summary", path, env={"COLUMNS": "250"})
    assert "first frame outside the allocation helpers (found automatically" in text.stdout


def test_report_has_a_call_site_table(traces, tmp_path):
    path, truth = traces["helper"]
    out = tmp_path / "r.html"
    cp = run_cli("report", path, "-o", str(out), "--bandwidth", "16", "--json")
    assert cp.returncode == 0, cp.stderr[-2000:]
    h = json.loads(cp.stdout)["headlines"]["call_sites"]
    assert set(h["count"]) == {_site(c, truth) for c in truth["callers"]}
    assert h["helpers"] == [f"helper_workload.py:{truth['lines']['helper']} in cuda_malloc"]
    page = out.read_text()
    assert "Call sites" in page and "call sites by allocations" in page
    assert all(_site(c, truth) in page for c in truth["callers"])
