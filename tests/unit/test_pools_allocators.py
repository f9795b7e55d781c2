"""Simulated allocators, part 2 (hand-computed): PyTorch expandable segments against the
classic segments, CNMeM stream managers (borrowing, no cross-stream reuse, stealing),
PyTorch allocator-config parsing, and the options reaching ``pools`` from the command
line and from the trace's recorded PYTORCH_CUDA_ALLOC_CONF."""
import json
import sys

import pandas as pd
import pytest

from conftest import fake_trace_files, run_cli
from pyinterpose.analysis.pools import evaluate, requests, simulate
from pyinterpose.analysis.pools.allocators import parse_alloc_conf
from pyinterpose.cli import main
from pyinterpose.errors import PyinterposeError
from pyinterpose.trace.model import Trace

MiB = 1 << 20
KiB = 1 << 10


def reqs(ops):
    """ops: ('a', id, size[, stream]) / ('f', id); a free carries its block's stream."""
    rows, sizes, streams = [], {}, {}
    for k, op in enumerate(ops):
        if op[0] == "a":
            sizes[op[1]], streams[op[1]] = op[2], (op[3] if len(op) > 3 else 0)
            rows.append((k, "alloc", op[1], op[2], streams[op[1]]))
        else:
            rows.append((k, "free", op[1], sizes[op[1]], streams[op[1]]))
    return pd.DataFrame(rows, columns=["seq", "op", "block_id", "size", "stream"])


def run(ops, allocator="pytorch", **kw):
    return simulate(reqs(ops), allocator, **kw)


# ---------------------------------------------------------------- expandable segments

def test_small_pool_grows_one_range_instead_of_new_segments():
    ops = [("a", i, 768 * KiB) for i in range(5)]
    # classic: a 2 MiB segment holds two 768 KiB blocks (512 KiB left over): 3 segments
    c = run(ops)
    assert c["peak_reserved_bytes"] == 6 * MiB and c["backing_allocations"] == 3
    # expandable: one range of 2 MiB pages; the third block straddles pages 0 and 1
    # (free 512 KiB tail + a newly mapped page), 5 x 768 KiB = 3.75 MiB -> 2 pages
    e = run(ops, expandable_segments=True)
    assert e["peak_reserved_bytes"] == 4 * MiB
    assert e["backing_allocations"] == 2  # pages mapped
    assert e["details"]["segment_maps"] == 2 and e["details"]["ranges"] == 1
    assert e["peak_allocated_bytes"] == 5 * 768 * KiB  # any remainder >= 512 B is split off


def test_batch_growth_reuses_the_range_where_classic_needs_a_new_segment():
    ops = [("a", 1, 30 * MiB), ("f", 1), ("a", 2, 8 * MiB), ("a", 3, 32 * MiB)]
    # classic: 30 MiB segment; 8 MiB split from it ([8][22 free]); 32 MiB needs its own segment
    c = run(ops)
    assert c["peak_reserved_bytes"] == 62 * MiB and c["backing_allocations"] == 2
    # expandable: 30 MiB maps two 20 MiB large-pool pages in one map; freed, the 40 MiB block
    # holds 8 MiB and then 32 MiB with no further mapping
    e = run(ops, expandable_segments=True)
    assert e["peak_reserved_bytes"] == 40 * MiB
    assert e["backing_allocations"] == 2 and e["details"]["segment_maps"] == 1
    # at 50 MiB the classic allocator cannot free the 30 MiB segment (8 MiB lives in it)
    assert run(ops, capacity=50 * MiB)["oom_at"] == 3
    assert run(ops, capacity=50 * MiB, expandable_segments=True)["oom_at"] is None


def test_free_block_before_the_unmapped_end_is_not_preferred():
    # page 0 (20 MiB): [a1 4][a2 7][a3 3][free 6 | unmapped ...]; a2 freed -> a free 7 MiB block inside
    ops = [("a", 1, 4 * MiB), ("a", 2, 7 * MiB), ("a", 3, 3 * MiB), ("f", 2),
           ("a", 4, 5 * MiB), ("a", 5, 7 * MiB)]
    # get_free_block counts the tail as 6 MiB + the unmapped space, so 5 MiB goes into the inner
    # 7 MiB block; then 7 MiB fits nowhere and the tail grows by one page
    e = run(ops, expandable_segments=True)
    assert e["peak_reserved_bytes"] == 40 * MiB and e["backing_allocations"] == 2
    # classic best fit: 5 MiB takes the 6 MiB tail whole (1 MiB remainder is not > 1 MiB), 7 MiB the hole
    c = run(ops)
    assert c["peak_reserved_bytes"] == 20 * MiB and c["backing_allocations"] == 1


def test_oom_unmaps_free_pages_of_other_streams_then_gives_up():
    ops = [("a", 1, 30 * MiB, 1), ("f", 1), ("a", 2, 10 * MiB, 2), ("a", 3, 30 * MiB, 1)]
    e = run(ops, expandable_segments=True, capacity=40 * MiB)
    # stream 1 maps 2 pages (40 MiB); stream 2's range cannot map a page until the OOM path
    # unmaps both free pages of stream 1 (its range is then released); stream 1's 30 MiB needs
    # a new range, 2 pages: 20 + 40 > 40 and nothing is free -> OOM at request 3
    assert e["oom_at"] == 3
    assert e["peak_reserved_bytes"] == 40 * MiB
    d = e["details"]
    assert (d["pages_mapped"], d["pages_unmapped"], d["ranges_released"]) == (3, 2, 1)
    # classic: stream 1 keeps its 30 MiB segment cached and reuses it
    c = run(ops, capacity=40 * MiB)
    assert c["oom_at"] is None and c["peak_reserved_bytes"] == 40 * MiB


def test_oom_unmaps_only_whole_free_pages():
    # stream 1: [a1 0-10][a2 10-40] over two pages; a2 freed: only page [20, 40) is wholly free
    ops = [("a", 1, 10 * MiB, 1), ("a", 2, 30 * MiB, 1), ("f", 2), ("a", 3, 20 * MiB, 2),
           ("a", 4, 10 * MiB, 1)]
    e = run(ops, expandable_segments=True, capacity=40 * MiB)
    assert e["oom_at"] is None and e["peak_reserved_bytes"] == 40 * MiB
    d = e["details"]
    # a4 fits the still-mapped [10, 20): no new page
    assert (d["pages_mapped"], d["pages_unmapped"], d["ranges"], d["ranges_released"]) == (3, 1, 2, 0)
    # one more 10 MiB on stream 1 needs a page: 40 + 20 > 40 and nothing is wholly free
    assert run(ops + [("a", 5, 10 * MiB, 1)], expandable_segments=True, capacity=40 * MiB)["oom_at"] == 5


def test_large_segment_size_sets_the_large_page():
    ops = [("a", 1, 12 * MiB)]
    assert run(ops, expandable_segments=True)["peak_reserved_bytes"] == 20 * MiB
    opts, _ = parse_alloc_conf("expandable_segments:True,large_segment_size_mb:64")
    assert run(ops, **opts)["peak_reserved_bytes"] == 64 * MiB
    # classic: 1-10 MiB requests get a segment of that size too
    opts, _ = parse_alloc_conf("large_segment_size_mb:64")
    assert run([("a", 1, 5 * MiB)], **opts)["peak_reserved_bytes"] == 64 * MiB


def test_max_split_size_releases_an_oversize_block_on_oom():
    # 40 MiB cached (oversize: >= 32 MiB); the 20 MiB request may not take it (< max_split_size)
    ops = [("a", 1, 40 * MiB), ("f", 1), ("a", 2, 20 * MiB)]
    opts, _ = parse_alloc_conf("max_split_size_mb:32")
    r = run(ops, capacity=50 * MiB, **opts)
    assert r["oom_at"] is None and r["backing_allocations"] == 2 and r["peak_reserved_bytes"] == 40 * MiB
    r = run(ops, **opts)  # no capacity: both stay
    assert r["peak_reserved_bytes"] == 60 * MiB


# ---------------------------------------------------------------- CNMeM streams

def test_cnmem_streams_do_not_reuse_each_others_memory():
    ops = [("a", 1, 1000, 1), ("f", 1), ("a", 2, 1000, 2)]
    r = run(ops, "cnmem")  # two streams: stream managers on by default
    assert r["details"]["streams"] is True and r["details"]["child_managers"] == 2
    assert r["peak_reserved_bytes"] == 2048 and r["backing_allocations"] == 2
    assert r["details"]["borrowed"] == 2
    r = run(ops, "cnmem", streams=False)  # one root manager: the freed 1024 B is reused
    assert r["peak_reserved_bytes"] == 1024 and r["backing_allocations"] == 1
    # a single stream (even a non-NULL one) stays on the root by default
    r = run([("a", 1, 1000, 7), ("f", 1), ("a", 2, 1000, 7)], "cnmem")
    assert r["details"]["streams"] is False and r["peak_reserved_bytes"] == 1024


def test_cnmem_borrowed_blocks_never_merge():
    ops = [("a", 1, 1000, 1), ("a", 2, 3000, 1), ("f", 1), ("f", 2), ("a", 3, 4096, 1), ("a", 4, 4096, 1)]
    # root reservation 8 KiB. Child of stream 1 borrows [0,1024) and [1024,4096): two heads, so
    # once freed they stay 1 KiB + 3 KiB; 4 KiB is borrowed from the root's [4096, 8192), the
    # next 4 KiB makes the root grow by an exact cudaMalloc
    r = run(ops, "cnmem", initial_bytes=8192, streams=True)
    assert r["peak_reserved_bytes"] == 12288 and r["backing_allocations"] == 2
    assert r["details"]["borrowed"] == 4
    # the root alone merges the two freed neighbours and fits both 4 KiB in its reservation
    r = run(ops, "cnmem", initial_bytes=8192, streams=False)
    assert r["peak_reserved_bytes"] == 8192 and r["backing_allocations"] == 1


def test_cnmem_steals_from_a_sibling_when_the_device_is_full():
    ops = [("a", 1, 1024, 1), ("f", 1), ("a", 2, 1024, 2)]
    r = run(ops, "cnmem", capacity=1024)
    assert r["oom_at"] is None and r["details"]["steals"] == 1 and r["peak_reserved_bytes"] == 1024
    assert run(ops, "cnmem", capacity=1024, steal=False)["oom_at"] == 2
    assert run(ops, "cnmem", capacity=1024, streams=False)["oom_at"] is None  # the root reuses it
    # the thief gets exactly its request: the rest of the giver's block stays with the giver
    ops = [("a", 1, 3072, 1), ("f", 1), ("a", 2, 1024, 2), ("a", 3, 2048, 1)]
    r = run(ops, "cnmem", capacity=3072)
    assert r["oom_at"] is None and r["details"]["steals"] == 1 and r["details"]["borrowed"] == 1
    assert run(ops + [("a", 4, 512, 1)], "cnmem", capacity=3072)["oom_at"] == 4


def test_cnmem_root_steals_the_inner_part_of_a_lent_block():
    # stream 1 borrows 3 KiB (device full at 3 KiB), frees it, takes 1 KiB back ([0,1K) used,
    # [1K,3K) free); the NULL stream's 2 KiB cannot grow the root and steals [1K,3K) from the
    # child; freed, it is the root's again, so stream 1's next 2 KiB borrows it without growing
    ops = [("a", 1, 3072, 1), ("f", 1), ("a", 2, 1024, 1), ("a", 3, 2048, 0), ("f", 3), ("f", 2),
           ("a", 4, 2048, 1)]
    r = run(ops, "cnmem", capacity=3072)
    assert r["oom_at"] is None and r["peak_reserved_bytes"] == 3072 and r["backing_allocations"] == 1
    assert (r["details"]["borrowed"], r["details"]["steals"]) == (2, 1)
    assert run(ops, "cnmem", capacity=3072, steal=False)["oom_at"] == 3
    # unlimited: the root grows by 2 KiB for the NULL stream and stream 1 reuses its own 3 KiB
    r = run(ops, "cnmem")
    assert r["peak_reserved_bytes"] == 5120 and r["details"]["borrowed"] == 1


def test_cnmem_stolen_block_is_a_head_in_the_root():
    # reservation 4 KiB = the device: the root holds [0,1K) for the NULL stream, lends [1K,4K) to
    # stream 1; both freed. 2 KiB on the NULL stream steals [1K,3K) (a head block of the root);
    # freed, it does not merge with the root's free [0,1K), so 3 KiB finds no room
    ops = [("a", 0, 1024, 0), ("a", 1, 3072, 1), ("f", 0), ("f", 1), ("a", 2, 2048, 0), ("f", 2),
           ("a", 3, 3072, 0)]
    r = run(ops, "cnmem", capacity=4096, initial_bytes=4096)
    assert r["oom_at"] == 6 and r["details"]["steals"] == 1


# ---------------------------------------------------------------- PYTORCH_ALLOC_CONF

def test_parse_alloc_conf_good():
    opts, ign = parse_alloc_conf("expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4")
    assert opts == {"expandable_segments": True, "max_split_size": 128 * MiB,
                    "roundup_power2_divisions": [4] * 16}
    assert ign == {}
    assert parse_alloc_conf("") == ({}, {})
    assert parse_alloc_conf(" expandable_segments : False ")[0] == {"expandable_segments": False}
    opts, _ = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
    assert opts["roundup_power2_divisions"] == [1] * 9 + [2, 4] + [8] * 5
    opts, ign = parse_alloc_conf("backend:native,max_non_split_rounding_mb:40,garbage_collection_threshold:0.6,"
                                 "release_lock_on_cudamalloc:True,pinned_num_register_threads:8")
    assert opts == {"max_non_split_rounding": 40 * MiB}
    assert ign == {"garbage_collection_threshold": 0.6, "release_lock_on_cudamalloc": True,
                   "pinned_num_register_threads": 8}


@pytest.mark.parametrize("conf, words", [
    ("expandable_segments:true", "True or False"),
    ("expandable_segments", "unexpected end"),
    ("expandable_segments:True,", "trailing"),
    ("expandable_segments:True;max_split_size_mb:128", "got 'True;max_split_size_mb'"),
    ("max_split_size_mb:10", ">= 20"),
    ("max_split_size_mb:12abc", "whole number"),
    ("max_split_size_mb:[20]", "single value"),
    ("large_segment_size_mb:10", "> 10"),
    ("roundup_power2_divisions:3", "power of 2"),
    ("roundup_power2_divisions:[3:1]", "powers of 2"),
    ("roundup_power2_divisions:[4:2", "unexpected end"),
    ("garbage_collection_threshold:1.5", "(0, 1)"),
    ("backend:cudaMallocAsync", "native"),
    ("foo:1", "unrecognized key 'foo'"),
])
def test_parse_alloc_conf_bad(conf, words):
    with pytest.raises(PyinterposeError) as e:
        parse_alloc_conf(conf)
    msg = str(e.value)
    assert words in msg and "\n" not in msg and repr(conf) in msg


def test_roundup_power2_divisions_round_requests():
    five = 5 * MiB + 1
    assert run([("a", 1, five)])["peak_allocated_bytes"] == 5 * MiB + 512
    # 4 divisions of [4, 8) MiB: steps of 1 MiB -> 6 MiB (split from its 20 MiB segment)
    assert run([("a", 1, five)], **parse_alloc_conf("roundup_power2_divisions:4")[0])["peak_allocated_bytes"] \
        == 6 * MiB
    # per interval: [4, 8) MiB has 2 divisions, everything above 8
    opts, _ = parse_alloc_conf("roundup_power2_divisions:[4:2,>:8]")
    assert run([("a", 1, five)], **opts)["peak_allocated_bytes"] == 6 * MiB
    assert run([("a", 1, 9 * MiB + 1)], **opts)["peak_allocated_bytes"] == 10 * MiB


# ---------------------------------------------------------------- evaluate and the CLI

GROWTH = [("a", 1, 30 * MiB), ("f", 1), ("a", 2, 8 * MiB), ("a", 3, 32 * MiB)]


def growth_trace(user_env=None):
    """The batch-growth stream as a one-process trace (62 MiB classic, 40 MiB expandable)."""
    r = reqs(GROWTH)
    alloc, free = r[r["op"] == "alloc"], r[r["op"] == "free"].set_index("block_id")
    seq_free = [int(free.loc[b, "seq"]) + 1 if b in free.index else 99 for b in alloc["block_id"]]
    b = pd.DataFrame({"block_id": alloc["block_id"].to_numpy(), "pid": 7, "kind": "device",
                      "size": alloc["size"].to_numpy(), "seq_alloc": alloc["seq"].to_numpy() + 1,
                      "seq_free": seq_free, "freed": [s != 99 for s in seq_free], "stream": 0})
    b["t_alloc"], b["t_free"] = b["seq_alloc"] * 10, b["seq_free"] * 10
    meta = {"view": "blocks", "knobs": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}}
    if user_env is not None:
        meta["user_env"] = user_env
    return Trace.from_tables(blocks=b, meta=meta)


def pytorch_row(res):
    return next(r for r in res["strategies"] if r["strategy"] == "pytorch")


def test_evaluate_uses_the_recorded_user_conf():
    row = pytorch_row(evaluate(growth_trace({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                               strategies="pytorch", window=(1, 6)))
    assert row["peak_bytes"] == 40 * MiB and row["options"] == {"expandable_segments": True}
    assert row["alloc_conf"]["source"] == "trace PYTORCH_CUDA_ALLOC_CONF"
    assert row["details"]["pages_mapped"] == 2
    # PYTORCH_ALLOC_CONF is read first (as PyTorch does)
    tr = growth_trace({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                       "PYTORCH_ALLOC_CONF": "expandable_segments:False"})
    row = pytorch_row(evaluate(tr, strategies="pytorch", window=(1, 6)))
    assert row["peak_bytes"] == 62 * MiB and row["alloc_conf"]["source"] == "trace PYTORCH_ALLOC_CONF"
    # given options win over the trace; the knobs pyinterpose set are never taken for the user's
    row = pytorch_row(evaluate(growth_trace({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                               strategies="pytorch", window=(1, 6), allocator_options={"pytorch": ""}))
    assert row["peak_bytes"] == 62 * MiB and row["alloc_conf"]["source"] == "given"
    row = pytorch_row(evaluate(growth_trace(), strategies="pytorch", window=(1, 6)))
    assert row["peak_bytes"] == 62 * MiB and row["alloc_conf"]["source"] == "default"
    assert "does not record" in row["alloc_conf"]["note"]
    # a recorded value the simulator cannot use falls back to the defaults, saying why
    row = pytorch_row(evaluate(growth_trace({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
                               strategies="pytorch", window=(1, 6)))
    assert row["peak_bytes"] == 62 * MiB and "cudaMallocAsync" in row["alloc_conf"]["note"]
    with pytest.raises(PyinterposeError):
        evaluate(growth_trace(), strategies="pytorch", window=(1, 6), allocator_options={"tcmalloc": {}})


def test_pools_cli_alloc_conf_and_trace_conf(monkeypatch, capsys):
    fake_trace_files(monkeypatch, {"user.pit": growth_trace({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                                   "plain.pit": growth_trace({})})
    assert main(["pools", "plain.pit", "--strategies", "pytorch", "--json"]) == 0
    assert pytorch_row(json.loads(capsys.readouterr().out))["peak_bytes"] == 62 * MiB
    assert main(["pools", "plain.pit", "--strategies", "pytorch", "--json",
                 "--alloc-conf", "expandable_segments:True,max_split_size_mb:128"]) == 0
    row = pytorch_row(json.loads(capsys.readouterr().out))
    assert row["peak_bytes"] == 40 * MiB
    assert row["options"] == {"expandable_segments": True, "max_split_size": 128 * MiB}
    assert row["alloc_conf"]["alloc_conf"] == "expandable_segments:True,max_split_size_mb:128"
    assert main(["pools", "user.pit", "--strategies", "pytorch", "--json"]) == 0
    assert pytorch_row(json.loads(capsys.readouterr().out))["peak_bytes"] == 40 * MiB
    # the table says which settings were used and where they came from
    assert main(["pools", "user.pit", "--strategies", "pytorch,cnmem"]) == 0
    out = capsys.readouterr().out
    assert "expandable_segments:True (from trace PYTORCH_CUDA_ALLOC_CONF)" in out
    assert "2 pages mapped in 1 maps" in out
    assert main(["pools", "user.pit", "--strategies", "pytorch", "--alloc-conf", "expandable_segments:False"]) == 0
    assert "(from --alloc-conf)" in capsys.readouterr().out
    # a bad value: one line on stderr, exit 2
    assert main(["pools", "user.pit", "--alloc-conf", "expandable_segments:yes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expandable_segments needs True or False" in err[0]


@pytest.mark.slow
def test_capture_records_the_user_conf_and_pools_uses_it(capture, native):
    """End to end on simcuda: the user's PYTORCH_CUDA_ALLOC_CONF reaches meta.user_env while
    the program sees the blocks-view knob, and ``pools`` simulates with the user's value."""
    conf = "expandable_segments:True,max_split_size_mb:64"
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch",
                        "--steps", "6", "--seed", "1"], env={"PYTORCH_CUDA_ALLOC_CONF": conf})
    assert cp.returncode == 0, cp.stderr
    import pyinterpose
    tr = pyinterpose.load(path)
    assert tr.meta["user_env"] == {"PYTORCH_CUDA_ALLOC_CONF": conf}
    assert tr.meta["knobs"]["PYTORCH_CUDA_ALLOC_CONF"] == "backend:cudaMallocAsync"
    cp = run_cli("pools", path, "--json", "--strategies", "pytorch")
    assert cp.returncode == 0, cp.stderr
    row = pytorch_row(json.loads(cp.stdout))
    assert row["alloc_conf"]["source"] == "trace PYTORCH_CUDA_ALLOC_CONF"
    assert row["options"] == {"expandable_segments": True, "max_split_size": 64 * MiB}
    expected = simulate(requests(tr), "pytorch", expandable_segments=True, max_split_size=64 * MiB)
    assert row["peak_bytes"] == expected["peak_reserved_bytes"]
    assert row["backing_allocations"] == expected["details"]["pages_mapped"]
    cp = run_cli("pools", path, "--json", "--strategies", "pytorch", "--alloc-conf", "max_split_size_mb:8")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and ">= 20" in cp.stderr
