"""The native allocator replay (native/allocsim, the only one pyinterpose runs) against the Python
reference simulators (``allocators_reference.py`` beside this file): identical results — peak reserved and allocated bytes,
backing allocations, where an OOM stops the replay, every detail — on random request streams
with every option, with and without a capacity, and on the real GPU traces."""
import random

import numpy as np
import pandas as pd
import pytest

from conftest import gpu_trace
from pyinterpose.analysis.pools import requests
from pyinterpose.analysis.pools.allocators import (RequestArrays, _cudamalloc_native, _lib, _simulate_native,
                                                   simulate)
from pyinterpose.errors import PyinterposeError

from allocators_reference import simulate_reference  # noqa: E402  (beside this file, on sys.path)

MiB = 1 << 20
KiB = 1 << 10

pytestmark = pytest.mark.skipif(_lib()[1] is None, reason="pyinterpose._core is not built with native/allocsim")

PYTORCH_OPTIONS = [
    {},
    {"expandable_segments": True},
    {"max_split_size": 40 * MiB},
    {"max_split_size": 64 * MiB, "max_non_split_rounding": 24 * MiB},
    {"roundup_power2_divisions": 4},
    {"roundup_power2_divisions": [1, 2, 4, 8, 0, 0, 16, 1, 2, 2, 4, 4, 8, 8, 16, 16]},
    {"large_segment_size": 32 * MiB},
    {"expandable_segments": True, "max_split_size": 40 * MiB},
    {"expandable_segments": True, "roundup_power2_divisions": 8, "large_segment_size": 12 * MiB},
    {"expandable_segments": True, "max_split_size": 24 * MiB, "max_non_split_rounding": 30 * MiB},
]
BFC_OPTIONS = [{}, {"allow_growth": False}, {"max_internal_fragmentation": 1 * MiB},
               {"allow_growth": False, "max_internal_fragmentation": 4 * MiB}]
CNMEM_OPTIONS = [{}, {"streams": True}, {"streams": False}, {"steal": False}, {"initial_bytes": 48 * MiB},
                 {"streams": True, "initial_bytes": 5 * MiB + 3}]
CASES = ([("cudamalloc", {})] + [("pytorch", o) for o in PYTORCH_OPTIONS] + [("bfc", o) for o in BFC_OPTIONS]
         + [("cnmem", o) for o in CNMEM_OPTIONS])


def _size(rng: random.Random) -> int:
    k = rng.random()
    if k < 0.45:
        return rng.randint(0, 1 * MiB + 4 * KiB)          # small pool and its edge
    if k < 0.75:
        return rng.randint(1 * MiB, 12 * MiB)             # large pool, below and above kMinLargeAlloc
    if k < 0.85:
        return 1 << rng.randint(8, 27)                    # powers of two (round_size's exact case)
    if k < 0.97:
        return rng.randint(12 * MiB, 90 * MiB)            # oversize blocks around max_split_size
    return rng.randint(90 * MiB, 300 * MiB)


def random_stream(seed: int, n: int = 700) -> pd.DataFrame:
    """Allocs and frees in a random order; some blocks never freed, a few frees of ids
    that are not live and a few allocations reusing a live id (the dict semantics)."""
    rng = random.Random(seed)
    streams = rng.choice([[0], [0], [7], [0, 7], [0, 7, 13], [5, 9], [1 << 63 | 5, 3]])
    live: dict = {}
    rows = []
    next_id = rng.randint(0, 3) * 1_000_000_007   # sometimes ids far from 0 (the hashed path)
    p_free = rng.uniform(0.35, 0.6)
    for k in range(n):
        r = rng.random()
        if live and r < p_free:
            bid = rng.choice(list(live))
            size, st = live.pop(bid)
            rows.append((k, "free", bid, size, st))
        elif r < p_free + 0.01:
            rows.append((k, "free", next_id + 10 ** 9, 4096, streams[0]))   # never allocated
        else:
            if live and rng.random() < 0.005:
                bid = rng.choice(list(live))                               # reused while live
            else:
                bid = next_id
                next_id += 1
            size, st = _size(rng), rng.choice(streams)
            live[bid] = (size, st)
            rows.append((k, "alloc", bid, size, st))
    df = pd.DataFrame(rows, columns=["seq", "op", "block_id", "size", "stream"])
    if any(s >= 1 << 63 for s in streams):
        df["stream"] = df["stream"].astype(np.uint64)
    return df


def _peak_live(req: pd.DataFrame) -> int:
    sizes = np.where(req["op"] == "alloc", 1, -1) * req["size"].to_numpy(np.int64)
    return int(np.cumsum(sizes).max())


def _same(req, allocator, capacity=None, **opts):
    """The native result equals the reference's."""
    arrs = RequestArrays(req)
    c = simulate(arrs, allocator, capacity, **opts)
    cs = simulate(arrs, allocator, capacity, series=True, **opts)
    p = simulate_reference(req, allocator, capacity, series=True, **opts)
    for r in (c, cs):
        r.pop("seconds")
    # the reserved curve: the same from C and from the reference, one value per request,
    # its maximum is the peak, and asking for it changes nothing else
    curve, ref_curve = cs.pop("reserved_after"), p.pop("reserved_after")
    assert curve.dtype == np.int64 and len(curve) == len(req)
    assert np.array_equal(curve, ref_curve), (allocator, capacity, opts, int(np.argmax(curve != ref_curve)))
    assert int(curve.max(initial=0)) == c["peak_reserved_bytes"], (allocator, capacity, opts)
    assert allocator == "cudamalloc" or (curve >= 0).all()   # (cudamalloc counts frees of unseen blocks)
    assert cs == c and c == p, (allocator, capacity, opts)
    c["reserved_after"] = curve
    n = (_cudamalloc_native(arrs, capacity) if allocator == "cudamalloc"
         else _simulate_native(arrs, allocator, capacity, opts))
    assert {"details": {}, **n, "allocator": allocator, "options": opts} == {k: v for k, v in c.items()
                                                                              if k != "reserved_after"}
    return c


@pytest.mark.parametrize("allocator,opts", CASES, ids=[f"{a}-{i}" for i, (a, _) in enumerate(CASES)])
def test_native_replay_equals_the_reference_on_random_streams(allocator, opts):
    ooms = falls = 0
    for seed in range(24):
        req = random_stream(seed * 31 + len(allocator))
        peak = _peak_live(req)
        rng = random.Random(seed)
        for capacity in (None, int(peak * rng.uniform(0.8, 1.1)), int(peak * rng.uniform(1.2, 2.5))):
            r = _same(req, allocator, capacity, **opts)
            ooms += r["oom_at"] is not None
            falls += bool((np.diff(r["reserved_after"]) < 0).any())
    assert ooms > 0   # the capacity paths (release of cached blocks, OOM, stealing) were exercised
    if allocator in ("cudamalloc", "pytorch"):
        assert falls > 0   # the curve is not a running maximum: releases show


@pytest.mark.slow
def test_the_options_reach_the_native_replay():
    """Every option changes the result on some stream, with or without a capacity (the
    comparison above is not vacuous)."""
    reqs = [r for r in (random_stream(seed, 1500) for seed in range(40)) if r["stream"].nunique() > 1][:6]
    key = ("peak_reserved_bytes", "backing_allocations", "peak_allocated_bytes", "oom_at", "details")
    for allocator, opts in CASES:
        if not opts:
            continue
        other = {"streams": not opts["streams"]} if "streams" in opts else {}   # auto is one of them
        changed = False
        for req in reqs:
            for c in (None, 0.85, 0.95, 1.05):
                c = None if c is None else int(_peak_live(req) * c)
                base, r = simulate(req, allocator, c, **other), simulate(req, allocator, c, **opts)
                changed |= any(r[k] != base[k] for k in key)
        assert changed, (allocator, opts)


def test_cnmem_stealing_and_expandable_release_happen_in_the_random_streams():
    steals = unmapped = released = 0
    for seed in range(40):
        req = random_stream(seed)
        peak = _peak_live(req)
        cap = int(peak * random.Random(seed).uniform(0.8, 1.1))
        steals += _same(req, "cnmem", cap, streams=True)["details"]["steals"]
        d = _same(req, "pytorch", cap, expandable_segments=True)["details"]
        unmapped += d["pages_unmapped"]
        released += d["ranges_released"]
    assert steals > 0 and unmapped > 0 and released > 0


def test_inputs_outside_the_native_range_are_refused_in_one_line():
    """Sizes beyond int64 (an object column) or beyond the C model's 32 TiB: pyinterpose refuses them with a
    one-line error naming the simulator (the reference, which has no such limit, still replays them)."""
    for big in (1 << 70, 1 << 50):
        req = random_stream(2, 200)
        req["size"] = req["size"].astype(object)
        first = int(np.flatnonzero(req["op"] == "alloc")[0])
        bid = req.loc[first, "block_id"]
        req.loc[req["block_id"] == bid, "size"] = big
        why = "size values beyond int64" if big >= 1 << 63 else "above 32 TiB"
        for a in ("cudamalloc", "pytorch", "bfc", "cnmem") if big < 1 << 63 else ("pytorch", "bfc", "cnmem"):
            assert simulate_reference(req, a)["peak_reserved_bytes"] >= big
            with pytest.raises(PyinterposeError, match=f"^{a} simulator: .*{why}") as e:
                simulate(req, a)
            assert "\n" not in str(e.value)


def test_option_values_the_native_replay_refuses():
    req = random_stream(3, 300)
    for a, opts, why in (("bfc", {"max_internal_fragmentation": 1.25 * MiB + 0.5}, "is not a whole number"),
                         ("pytorch", {"max_split_size": 1 << 62}, "out of range"),
                         ("pytorch", {"roundup_power2_divisions": [1, 2]}, "2 values, not 16"),
                         ("pytorch", {"max_spilt_size": 40 * MiB}, r"bad option \(max_spilt_size\): it takes"),
                         ("cnmem", {"initial_bytes": 4 * MiB}, "initial_bytes 4194304 exceed the capacity"),
                         ("pytorch", {}, "above 4 PiB")):
        cap = 1 * MiB if a == "cnmem" else (1 << 53) if not opts else None
        with pytest.raises(PyinterposeError, match=why):
            simulate(req, a, cap, **opts)


GPU_TRACES = ["torch-cnn-blocks.pit", "torch-cnn-reserved.pit", "torch-transformer-blocks.pit",
              "torch-transformer-reserved.pit", "jax-attn-blocks.pit", "jax-attn-reserved.pit",
              "graphs-blocks.pit", "loader-blocks.pit"]


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_TRACES)
def test_native_replay_equals_the_reference_on_gpu_traces(name):
    import pyinterpose

    tr = pyinterpose.load(gpu_trace(name))
    for only in (True, False):
        req = requests(tr, allocator_only=only)
        if len(req) == 0:
            continue
        for allocator, opts in CASES:
            _same(req, allocator, **opts)
        peak = _peak_live(req)
        for allocator, opts in (("pytorch", {}), ("pytorch", {"expandable_segments": True}),
                                ("pytorch", {"max_split_size": 40 * MiB}), ("bfc", {}), ("cnmem", {"streams": True})):
            _same(req, allocator, int(peak * 1.05), **opts)


def test_evaluate_takes_whole_number_float_options():
    """An option value given as a float that holds a whole number (``1.5 * MiB``) goes to the native
    replay as that integer: evaluate's row equals the reference's for it."""
    from pyinterpose.analysis.pools import evaluate
    from pyinterpose.analysis.pools.generate import training_trace

    tr, _ = training_trace(iterations=3, layers=20, seed=2)
    opts = {"max_internal_fragmentation": 1.5 * MiB}
    res = evaluate(tr, strategies="bfc,pytorch", allocator_options={"bfc": opts}, time_limit=1)
    req = requests(tr, allocator_only=True)
    ref = simulate_reference(req, "bfc", **opts)
    row = res["strategies"][0]
    assert row["strategy"] == "bfc" and row["options"] == opts
    assert (row["peak_bytes"], row["backing_allocations"], row["peak_allocated_bytes"]) == \
        (ref["peak_reserved_bytes"], ref["backing_allocations"], ref["peak_allocated_bytes"])
    key = ("peak_reserved_bytes", "backing_allocations", "peak_allocated_bytes")
    assert [ref[k] for k in key] != [simulate_reference(req, "bfc")[k] for k in key]   # the option matters here
    nat = simulate(req, "pytorch")
    assert res["strategies"][1]["peak_bytes"] == nat["peak_reserved_bytes"]


def test_pools_refuses_an_option_out_of_range_in_one_line():
    import os

    from conftest import ROOT, run_cli

    cp = run_cli("pools", "--alloc-conf", "max_split_size_mb:9000000000",
                 os.path.join(ROOT, "samples", "torch-cnn-blocks.pit"))
    assert cp.returncode == 2 and cp.stdout == ""
    assert cp.stderr.count("\n") == 1 and "pytorch simulator: " in cp.stderr and "above 4 PiB" in cp.stderr
