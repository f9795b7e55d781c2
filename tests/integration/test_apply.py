"""`pyinterpose run --apply plan.json` on simcuda, through the real preload.

Ground truth is independent of the shim: simcuda's own high-water mark (SIMCUDA_STATS, counted in
the simulated driver), simtrain's own data check (SIMCUDA_CHECK=1: a pattern in every live block,
checked before its free; any overwrite fails the run) and simtrain's truth file."""
from __future__ import annotations

import json
import os

import pytest

import pyinterpose
from conftest import run_cli
from pyinterpose.analysis.applied import served_mask

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIMTRAIN = ["python", "-m", "pyinterpose.examples.simtrain"]


def _run(tmp_path, name, args, plan=None, env=None, view="blocks"):
    trace = str(tmp_path / f"{name}.pit")
    stats = tmp_path / f"{name}.stats"
    truth = tmp_path / f"{name}.truth.json"
    e = {"SIMCUDA_CHECK": "1", "SIMCUDA_STATS": str(stats)}
    e.update(env or {})
    opts = ["--apply", plan] if plan else []
    cp = run_cli("run", "-q", "--simulated-gpu", "--view", view, "-o", trace, *opts, "--", *SIMTRAIN, *args,
                 "--truth", str(truth), env=e)
    st = [json.loads(x) for x in stats.read_text().splitlines()] if stats.exists() else []
    tr = json.loads(truth.read_text()) if truth.exists() else None
    return cp, trace, st, tr


def _plan(tmp_path, name, args, strategy="optimal"):
    cp, trace, _, _ = _run(tmp_path, name + "-profile", args)
    assert cp.returncode == 0, cp.stderr
    plan = str(tmp_path / f"{name}.plan.json")
    cp = run_cli("plan", trace, "-o", plan, "--strategy", strategy, "--json")
    assert cp.returncode == 0, cp.stderr
    return plan, json.loads(cp.stdout)


def _applied(trace):
    cp = run_cli("summary", trace, "--json")
    assert cp.returncode == 0, cp.stderr
    return json.loads(cp.stdout)["applied"]


@pytest.fixture(scope="module")
def torch_plan(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    return _plan(d, "torch", ["--steps", "6", "--layers", "3"])


def test_data_intact_and_high_water_is_the_arena(tmp_path, torch_plan):
    plan, info = torch_plan
    cp0, _, st0, truth0 = _run(tmp_path, "plain", ["--steps", "6", "--layers", "3"])
    cp, trace, st, truth = _run(tmp_path, "applied", ["--steps", "6", "--layers", "3"], plan=plan)
    assert cp0.returncode == 0 and cp.returncode == 0, cp.stderr   # simtrain's data check passed
    a = _applied(trace)["processes"][0]
    device_requests = truth["allocs"] - truth["by_api"].get("cudaMallocHost", 0)
    assert a["served"] == a["requests"] == device_requests       # every request served, nothing fell through
    assert a["served_blocks"] == device_requests
    # simcuda's own high-water mark: the arena and nothing else
    assert st[0]["peak_bytes"][0] == info["capacity"] == a["arena_capacity"] == a["real_peak_bytes"]
    # the one real device allocation is the arena (beside the pinned host staging buffer)
    assert st[0]["allocs"] == 1 + truth["by_api"].get("cudaMallocHost", 0)
    # the program did the same work with and without the plan
    for k in ("allocs", "frees", "bytes", "launches", "accesses", "by_api"):
        assert truth[k] == truth0[k], k
    assert truth["result_hashes"] == truth0["result_hashes"]   # the trained state, bit for bit
    # the trace still has every block, with its address in the arena
    t = pyinterpose.load(trace)
    dev = t.blocks[t.blocks["kind"].astype(str) != "host"]
    assert len(dev) == device_requests and dev["freed"].all()
    assert "next: pyinterpose run --apply" not in cp.stderr


def test_noise_falls_through_and_high_water_is_arena_plus_fall_through(tmp_path, torch_plan):
    plan, info = torch_plan
    args = ["--steps", "12", "--layers", "3", "--noise", "0.5", "--noise-kinds", "extra,missing,stream2",
            "--seed", "3"]
    cp, trace, st, truth = _run(tmp_path, "noisy", args, plan=plan)
    assert cp.returncode == 0, cp.stderr
    cp0, _, _, truth0 = _run(tmp_path, "noisy-plain", args)
    assert cp0.returncode == 0 and truth["result_hashes"] == truth0["result_hashes"]
    assert truth["noise_steps"] > 0
    s = _applied(trace)["processes"][0]
    assert s["fell_through"] > 0 and s["by_reason"]["no_key"] > 0   # the extra requests
    # a missing request shifts the ordinals of its key: a later one may map to a slot whose range is
    # still live (overlap) -- it falls through, and the data check proves nothing was overwritten
    assert s["served"] > 0 and not s["refused"]
    per = {r["iteration"]: r for r in s["iterations"]}
    assert per[0]["served"] > 0
    # simcuda's peak = the arena (from its reservation) + the device blocks that fell through, at their
    # highest together (computed from the trace's blocks in sequence order)
    t = pyinterpose.load(trace)
    assert st[0]["peak_bytes"][0] == s["real_peak_bytes"]
    fell = t.blocks[~served_mask(t) & t.blocks["counts_device"]]
    assert info["capacity"] < st[0]["peak_bytes"][0] <= info["capacity"] + int(fell["size"].sum())
    # the input freed on a second stream, then its slot handed out on the first: a stream wait each time
    assert st[0]["stream_waits"] > 0


def test_mismatched_plan_serves_nothing_and_says_so(tmp_path, torch_plan):
    plan, _ = torch_plan
    cp, trace, st, truth = _run(tmp_path, "other", ["--steps", "6", "--layers", "12"], plan=plan)
    assert cp.returncode == 0, cp.stderr
    assert "does not match this program" in cp.stderr
    s = _applied(trace)["processes"][0]
    assert s["refused"]
    k = s["refused_at_iteration"]
    after = [r for r in s["iterations"] if r["iteration"] >= k]
    assert after and all(r["served"] == 0 for r in after) and sum(r["off"] for r in after) > 0


def test_overlapping_slots_are_never_handed_out_together(tmp_path, torch_plan):
    """A plan whose slots all share offset 0 (lifetimes made disjoint so it passes the plan check): the
    shim's live-interval check must fall through rather than hand out overlapping blocks."""
    plan, _ = torch_plan
    doc = json.loads(open(plan).read())
    for i, r in enumerate(doc["requests"]):
        r["offset"], r["lifetime"] = 0, [i, i + 1]
    doc["capacity"] = max(r["slot_size"] for r in doc["requests"])
    bad = str(tmp_path / "aliased.json")
    with open(bad, "w") as f:
        json.dump(doc, f)
    cp, trace, st, _ = _run(tmp_path, "aliased", ["--steps", "6", "--layers", "3"], plan=bad)
    assert cp.returncode == 0, cp.stderr      # simtrain's data check: no live block was overwritten
    s = _applied(trace)["processes"][0]
    assert s["by_reason"]["overlap"] > 0 and s["served"] > 0


@pytest.mark.parametrize("framework", ["jax", "tf"])
def test_driver_apis_are_served(tmp_path, framework):
    args = ["--framework", framework, "--steps", "5", "--layers", "3"]
    plan, info = _plan(tmp_path, framework, args)
    cp, trace, st, truth = _run(tmp_path, framework, args, plan=plan)
    assert cp.returncode == 0, cp.stderr
    _, _, _, truth0 = _run(tmp_path, framework + "-plain", args)
    assert truth["result_hashes"] == truth0["result_hashes"]
    s = _applied(trace)["processes"][0]
    assert s["served"] == s["requests"] == truth["allocs"] and s["fell_through"] == 0
    assert st[0]["peak_bytes"][0] == info["capacity"]


def test_forked_worker_does_not_use_the_parents_arena(tmp_path, torch_plan):
    plan, _ = torch_plan
    cp, trace, st, truth = _run(tmp_path, "workers", ["--steps", "6", "--layers", "3", "--workers", "1"], plan=plan)
    assert cp.returncode == 0, cp.stderr
    t = pyinterpose.load(trace)
    parent, child = truth["pids"]
    served = served_mask(t)
    assert served[t.blocks["pid"].to_numpy() == parent].sum() > 0
    assert served[t.blocks["pid"].to_numpy() == child].sum() == 0
    assert child not in set(t.applied["pid"].tolist())   # the child never looked at the plan


def test_bad_plan_file_is_one_line(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", str(tmp_path / "t.pit"), "--apply", str(bad), "--",
                 *SIMTRAIN, "--steps", "2")
    assert cp.returncode == 2 and cp.stderr.strip().count("\n") == 0 and "not a plan file" in cp.stderr
    assert not os.path.exists(tmp_path / "t.pit")


def test_trace_without_owners_keys_by_size_and_ordinal(tmp_path):
    """A trace recorded without call sites (PYINTERPOSE_SITES=0: every owner unknown): the plan says so and
    the shim ignores the callers it sees at run time."""
    args = ["--steps", "5", "--layers", "3"]
    cp, trace, _, _ = _run(tmp_path, "nosites", args, env={"PYINTERPOSE_SITES": "0"})
    assert cp.returncode == 0, cp.stderr
    plan = str(tmp_path / "nosites.plan.json")
    assert run_cli("plan", trace, "-o", plan).returncode == 0
    assert json.load(open(plan))["sites"] is False
    cp, trace, st, truth = _run(tmp_path, "nosites-apply", args, plan=plan)
    assert cp.returncode == 0, cp.stderr
    s = _applied(trace)["processes"][0]
    assert s["served"] == s["requests"] > 0
