"""`run --apply` with threads competing for the plan's slots and a thread on another device
(tests/c/apply_threads.c checks every block's bytes before its free; its exit status is the verdict)."""
from __future__ import annotations

import json

import pyinterpose
from conftest import run_cli
from pyinterpose.analysis.applied import served_mask
import pytest

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)


def test_threads_and_a_second_device(tmp_path, cbuild):
    exe = cbuild("apply_threads")
    prof = str(tmp_path / "p.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", prof, "--", exe, "30")
    assert cp.returncode == 0, cp.stderr
    plan = str(tmp_path / "plan.json")
    cp = run_cli("plan", prof, "-o", plan, "--json")
    assert cp.returncode == 0, cp.stderr
    trace = str(tmp_path / "a.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", trace, "--apply", plan, "--", exe, "400",
                 env={"HELPERS": "3", "DEV1": "1", "SIMCUDA_DEVICES": "2", "SIMCUDA_CHECK": "1"})
    assert cp.returncode == 0, cp.stderr          # no block's bytes were overwritten while it lived
    made = json.loads(cp.stdout.strip().splitlines()[-1])
    t = pyinterpose.load(trace)
    s = run_cli("summary", trace, "--json")
    a = json.loads(s.stdout)["applied"]["processes"][0]
    assert a["requests"] == made["requests"] == len(t.blocks)      # every request counted once
    assert a["served"] > 0 and a["fell_through"] > 0 and not a["refused"], a["notes"]
    served = served_mask(t)
    dev1 = (t.blocks["device"].to_numpy() == 1)
    assert made["device1"] > 0 and dev1.sum() == made["device1"]
    assert not (served & dev1).any()                               # the arena is device 0's only
    # no two served blocks were live at once at overlapping addresses
    b = t.blocks[served].sort_values("seq_alloc")
    live = []
    for r in b.itertuples():
        live = [x for x in live if x[2] > r.seq_alloc]
        for lo, hi, _ in live:
            assert r.address + r.size <= lo or r.address >= hi
        live.append((r.address, r.address + r.size, r.seq_free))


def test_requests_on_another_device_fall_through(tmp_path, cbuild):
    exe = cbuild("apply_threads")
    prof = str(tmp_path / "p.pit")
    assert run_cli("run", "-q", "--simulated-gpu", "-o", prof, "--", exe, "20").returncode == 0
    plan = str(tmp_path / "plan.json")
    assert run_cli("plan", prof, "-o", plan).returncode == 0
    trace = str(tmp_path / "a.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", trace, "--apply", plan, "--", exe, "20",
                 env={"LOOPDEV": "1", "SIMCUDA_DEVICES": "2", "SIMCUDA_CHECK": "1"})
    assert cp.returncode == 0, cp.stderr
    a = json.loads(run_cli("summary", trace, "--json").stdout)["applied"]["processes"][0]
    # the weight (device 0) made the arena; every request of the loop, on device 1, fell through
    assert a["served"] == 1 and a["by_reason"]["other"] == a["requests"] - 1 == 20 * 13


def test_iterations_from_markers(tmp_path, cbuild):
    exe = cbuild("apply_threads")
    prof = str(tmp_path / "p.pit")
    env = {"MARKS": "1", "SIMCUDA_CHECK": "1"}
    assert run_cli("run", "-q", "--simulated-gpu", "-o", prof, "--", exe, "20", env=env).returncode == 0
    plan = str(tmp_path / "plan.json")
    cp = run_cli("plan", prof, "-o", plan, "--json")
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["boundary"] == "markers"
    trace = str(tmp_path / "a.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", trace, "--apply", plan, "--", exe, "25", env=env)
    assert cp.returncode == 0, cp.stderr
    a = json.loads(run_cli("summary", trace, "--json").stdout)["applied"]["processes"][0]
    assert a["served"] == a["requests"] == 1 + 25 * 13 and not a["refused"]
    assert [r["iteration"] for r in a["iterations"]] == list(range(-1, 25))   # one row per marker (+ before)


def test_nothing_is_served_during_graph_capture(tmp_path, cbuild):
    exe = cbuild("apply_capture")
    prof = str(tmp_path / "p.pit")
    assert run_cli("run", "-q", "--simulated-gpu", "-o", prof, "--", exe, "10").returncode == 0
    plan = str(tmp_path / "plan.json")
    cp = run_cli("plan", prof, "-o", plan)
    assert cp.returncode == 0, cp.stderr
    trace = str(tmp_path / "a.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", trace, "--apply", plan, "--", exe, "10",
                 env={"CAPTURE_AT": "5"})
    assert cp.returncode == 0, cp.stderr
    made = json.loads(cp.stdout.strip().splitlines()[-1])
    a = json.loads(run_cli("summary", trace, "--json").stdout)["applied"]["processes"][0]
    assert a["requests"] == made["requests"] and made["captured"] == 7
    assert a["by_reason"]["capture"] == 7 and a["served"] == made["requests"] - 7
    per = {r["iteration"]: r for r in a["iterations"]}
    assert per[5]["served"] == 0 and per[5]["capture"] == 7
