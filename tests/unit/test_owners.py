"""Owners of allocations and the framework allocator's requests (pyinterpose.analysis.owners), and
what the pool simulators replay: a PyTorch-like run where a library makes its own cuMemAlloc_v2
workspace outside the allocator (the 128 MiB seen on the real H100 traces)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import owners
from pyinterpose.analysis.pools import evaluate
from pyinterpose.analysis.summary import summarize
from pyinterpose.trace.model import Trace

MiB = 1 << 20


def torch_like(owner_col: bool = False, view: str = "blocks") -> Trace:
    """10 steps of [4 MiB act, 8 MiB act] via cudaMallocAsync, plus one 100 MiB cuMemAlloc_v2
    library workspace made before the loop and kept to the end."""
    rows = []
    seq = 0

    def add(api, size, sa, sf, owner):
        rows.append({"pid": 1, "api": api, "kind": "async" if api == "cudaMallocAsync" else "device",
                     "address": 0x1000 * (len(rows) + 1), "size": size, "seq_alloc": sa, "seq_free": sf,
                     "t_alloc": sa * 100, "t_free": sf * 100, "freed": sf < 10_000, "owner": owner})

    add("cuMemAlloc_v2", 100 * MiB, 0, 10_000, "libcublasLt.so.13")
    seq = 1
    for _ in range(10):
        add("cudaMallocAsync", 4 * MiB, seq, seq + 3, "libc10_cuda.so")
        add("cudaMallocAsync", 8 * MiB, seq + 1, seq + 2, "libc10_cuda.so")
        seq += 4
    b = pd.DataFrame(rows)
    b.insert(0, "block_id", np.arange(len(b)))
    if not owner_col:
        b = b.drop(columns=["owner"])
    return Trace.from_tables(blocks=b, meta={"view": view, "command": ["python", "train_torch.py"]})


def test_api_fallback_without_owners():
    tr = torch_like()
    assert owners.framework(tr) == "pytorch"
    m = owners.allocator_mask(tr)
    assert m.sum() == 20 and not m[tr.blocks["api"].astype(str) == "cuMemAlloc_v2"].any()
    assert owners.block_owners(tr).tolist()[:2] == ["cuMemAlloc_v2", "cudaMallocAsync"]
    t = owners.bytes_by_owner(tr)
    assert list(t.columns) == ["owner", "blocks", "bytes", "peak_live_bytes", "is_allocator"]
    assert t.to_dict("records") == [
        {"owner": "cuMemAlloc_v2", "blocks": 1, "bytes": 100 * MiB, "peak_live_bytes": 100 * MiB,
         "is_allocator": False},
        {"owner": "cudaMallocAsync", "blocks": 20, "bytes": 120 * MiB, "peak_live_bytes": 12 * MiB,
         "is_allocator": True}]


def test_recorded_owners_win_over_the_api():
    tr = torch_like(owner_col=True)
    # the library's workspace made with the allocator's API is still not the allocator's
    tr.blocks.loc[0, "api"] = "cudaMallocAsync"
    tr.blocks["kind"] = tr.blocks["kind"].astype(str)
    assert owners.framework(tr.__class__.from_tables(blocks=tr.blocks, meta={"view": "blocks"})) == "pytorch"
    m = owners.allocator_mask(tr)
    assert m.sum() == 20 and not m[0]
    t = owners.bytes_by_owner(tr)
    assert t["owner"].tolist() == ["libcublasLt.so.13", "libc10_cuda.so"]
    assert t["is_allocator"].tolist() == [False, True]


def test_framework_detection():
    tr = torch_like()
    tr.meta = {"framework": "tf"}
    assert owners.framework(tr) == "tensorflow"
    tr.meta = {"command": ["python", "-m", "pyinterpose.examples.simtrain", "--framework", "jax"]}
    assert owners.framework(tr) == "jax"
    tr.meta = {"command": ["python3", "workloads/jax_train.py"]}
    assert owners.framework(tr) == "jax"


def test_reserved_view_allocator_is_its_segments():
    tr = torch_like(view="reserved")
    tr.blocks["api"] = tr.blocks["api"].astype(str).replace({"cudaMallocAsync": "cudaMalloc"})
    m = owners.allocator_mask(tr)
    assert m.sum() == 20


def test_no_block_made_the_allocators_way_falls_back_to_every_device_block():
    tr = torch_like()
    tr.blocks["api"] = "cudaMalloc"     # a plain CUDA program: nothing is "cudaMallocAsync"
    assert owners.allocator_mask(tr).sum() == len(tr.blocks)


def test_simulators_replay_only_the_allocators_requests():
    tr = torch_like()
    res = evaluate(tr, strategies="cudamalloc,pytorch", window=(1, 5))
    # replaying everything would put the 100 MiB workspace into the simulated allocator
    assert res["bound_whole_run_bytes"] == 12 * MiB
    assert res["outside_allocator"] == {"blocks": 1, "bytes": 100 * MiB, "peak_live_bytes": 100 * MiB}
    assert res["allocator"]["blocks"] == 20 and res["allocator"]["framework"] == "pytorch"
    py = next(r for r in res["strategies"] if r["strategy"] == "pytorch")
    assert py["peak_bytes"] < 100 * MiB
    cm = next(r for r in res["strategies"] if r["strategy"] == "cudamalloc")
    assert cm["peak_bytes"] == 12 * MiB


def test_summary_shows_bytes_per_owner():
    s = summarize(torch_like())
    assert [r["owner"] for r in s["by_owner"]] == ["cuMemAlloc_v2", "cudaMallocAsync"]
    assert s["outside_allocator"]["peak_live_bytes"] == 100 * MiB
    assert s["allocator"]["peak_live_bytes"] == 12 * MiB and s["framework"] == "pytorch"


def test_compare_shows_bytes_per_owner(monkeypatch, tmp_path):
    from pyinterpose.analysis.compare import compare
    from pyinterpose.report.compare_view import metric_rows

    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    cmp = compare([torch_like(), torch_like()], ["a", "b"], bandwidth=16, pools=False, swap=False)
    r = cmp["traces"][0]
    assert r["allocator_peak_bytes"] == 12 * MiB and r["outside_allocator_bytes"] == 100 * MiB
    assert [o["owner"] for o in r["by_owner"]] == ["cuMemAlloc_v2", "cudaMallocAsync"]
    _, rows = metric_rows(cmp)
    lines = {row[0]: row[1:] for row in rows}
    assert lines["owner: cuMemAlloc_v2 (peak)"] == ["100.0 MiB (1 blocks)"] * 2
    assert lines["owner: cudaMallocAsync (peak)"] == ["12.0 MiB (20 blocks, allocator)"] * 2


def test_allocator_mask_categorical_owners_tested_per_category():
    """allocator_mask tests each distinct owner once: same answer as testing every row (missing owners,
    mixed case, categorical and object columns)."""
    from pyinterpose.analysis.owners import _ALLOCATOR_OBJECTS, allocator_mask
    from pyinterpose.report.synthetic import training_trace as _tt

    tr = _tt(iterations=3)
    rng = np.random.default_rng(5)
    names = np.array(["libc10_cuda.so", "LIBC10_CUDA.so.2", "libtorch_cuda.so", "python", ""], dtype=object)
    own = names[rng.integers(0, len(names), len(tr.blocks))]
    own[::7] = None
    tr.meta["framework"] = "pytorch"
    for col in (pd.Categorical(own), pd.Series(own, dtype=object)):
        tr.blocks["owner"] = col
        low = tr.blocks["owner"].astype(str).str.lower()
        want = np.zeros(len(low), bool)
        for p in _ALLOCATOR_OBJECTS["pytorch"]:
            want |= low.str.contains(p, regex=False).to_numpy(bool, na_value=False)
        want &= tr.blocks["counts_device"].to_numpy(bool)
        assert want.any()
        assert (allocator_mask(tr) == want).all()


@pytest.mark.parametrize("rows", [0, 1, 7, 1000])
def test_owner_names_are_the_used_categories_in_order(monkeypatch, rows):
    """The recorded owners are the categories some row holds, in the categories' order (what pandas'
    ``remove_unused_categories`` keeps), counted a piece at a time; missing values and "" left out."""
    from pyinterpose.trace import chunking

    monkeypatch.setattr(chunking, "chunk_rows", lambda: 3)       # several pieces, one cut mid-run
    cats = ["libz.so", "libc10_cuda.so", "", "python", "unused", "libcublas.so"]
    rng = np.random.default_rng(rows)
    codes = rng.integers(-1, len(cats), rows).astype(np.int8)
    codes[codes == 4] = 0                                           # "unused" never appears
    b = pd.DataFrame({"owner": pd.Categorical.from_codes(codes, cats)})
    # independent: the categories, in order, that equal some row's value
    present = set(b["owner"].dropna().astype(str))
    want = [c for c in cats if c in present and c != ""]
    assert owners._owner_names(b) == want
    if rows == 1000:
        assert want == ["libz.so", "libc10_cuda.so", "python", "libcublas.so"]
