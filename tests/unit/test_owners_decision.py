"""One decision of framework and owner (pyinterpose.analysis.owners.allocator), the same in every
command: summary, report, compare and pools say the same framework and never contradict the rule
that was applied; ctypes/cffi's libffi is looked through, never taken for a framework's allocator;
compare's reserve ratio is the allocator's reserve over the allocator's own live peak."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pyinterpose.analysis import owners
from pyinterpose.trace import stacks
from pyinterpose.analysis.summary import summarize
from pyinterpose.trace.model import Trace

MiB = 1 << 20


def blocks_of(rows):
    b = pd.DataFrame(rows)
    b.insert(0, "block_id", np.arange(len(b)))
    return b


def loop(api="cudaMallocAsync", owner=None, steps=8, library=True):
    """steps x [4 MiB, 8 MiB] through ``api`` (owner ``owner``), plus a 100 MiB library workspace."""
    rows, seq = [], 1

    def add(api_, size, sa, sf, own):
        r = {"pid": 1, "api": api_, "kind": "async" if api_ == "cudaMallocAsync" else "device",
             "address": 0x1000 * (len(rows) + 1), "size": size, "seq_alloc": sa, "seq_free": sf,
             "t_alloc": sa * 100, "t_free": sf * 100, "freed": sf < 10_000}
        if owner is not None:
            r["owner"] = own
        rows.append(r)

    if library:
        add("cuMemAlloc_v2", 100 * MiB, 0, 10_000, "libcublasLt.so.13")
    for _ in range(steps):
        add(api, 4 * MiB, seq, seq + 3, owner)
        add(api, 8 * MiB, seq + 1, seq + 2, owner)
        seq += 4
    return blocks_of(rows)


def test_owner_rule_is_never_claimed_when_the_api_rule_decided():
    """simtrain: owner libsimtrain.so, `--framework torch`: the API rule decides, and says so."""
    tr = Trace.from_tables(blocks=loop(owner="libsimtrain.so"),
                           meta={"view": "blocks", "command": ["python", "-m", "simtrain", "--framework", "torch"]})
    a = owners.allocator(tr)
    assert (a.framework, a.framework_from, a.source) == ("pytorch", "command", "api")
    assert a.rule == "cudaMallocAsync (one per tensor)"
    assert "libsimtrain.so" in a.note and "libc10_cuda" in a.note
    info = summarize(tr)["allocator"]
    assert info["source"] == "api" and "owner is" not in info["rule"]


def test_recorded_framework_owner_names_the_object():
    tr = Trace.from_tables(blocks=loop(owner="libc10_cuda.so"), meta={"view": "blocks"})
    a = owners.allocator(tr)
    assert (a.framework, a.framework_from, a.source) == ("pytorch", "owners", "owners")
    assert a.rule == "owner libc10_cuda.so (pytorch's allocator)" and a.mask.sum() == 16


def test_ctypes_script_is_no_framework_and_libffi_is_looked_through():
    tr = Trace.from_tables(blocks=loop(api="cudaMalloc", owner="libffi.so.8", library=False),
                           meta={"view": "blocks", "command": ["python", "script.py"]})
    a = owners.allocator(tr)
    assert (a.framework, a.source) == ("unknown", "none")
    assert set(owners.block_owners(tr)) == {"python (through libffi.so.8)"}
    t = owners.bytes_by_owner(tr)
    assert t["owner"].tolist() == ["python (through libffi.so.8)"] and not t["is_allocator"].any()
    s = summarize(tr)
    assert s["framework"] == "unknown" and s["by_owner"][0]["is_allocator"] is False
    # cffi and ctypes' own modules are trampolines too; a framework named by the command still wins
    assert stacks.is_trampoline("_cffi_backend.cpython-311-x86_64-linux-gnu.so")
    assert stacks.is_trampoline("_ctypes.cpython-311-x86_64-linux-gnu.so")
    assert not stacks.is_trampoline("libc10_cuda.so")


def test_owners_recorded_without_a_framework_do_not_guess_from_apis():
    """cudaMalloc alone used to mean "pytorch"; with owners recorded and none a framework's, no."""
    tr = Trace.from_tables(blocks=loop(api="cudaMalloc", owner="libmyapp.so", library=False),
                           meta={"view": "blocks", "command": ["./myapp"]})
    assert owners.framework(tr) == "unknown"
    # without owners the API fallback still applies (old traces)
    tr2 = Trace.from_tables(blocks=loop(), meta={"view": "blocks", "command": ["./myapp"]})
    assert owners.allocator(tr2).framework_from == "apis" and owners.framework(tr2) == "pytorch"


@pytest.mark.parametrize("meta", [{"view": "blocks", "command": ["./trainer"]},
                                  {"view": "blocks", "framework": "torch", "command": ["x"]}])
def test_every_command_says_the_same_framework(meta, tmp_path, monkeypatch):
    from pyinterpose.analysis.compare import compare
    from pyinterpose.report import html

    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    tr = Trace.from_tables(blocks=loop(), meta=meta)
    want = owners.framework(tr)
    assert want == "pytorch"
    assert summarize(tr)["framework"] == want
    assert compare([tr], ["a"], bandwidth=16, pools=False, swap=False)["traces"][0]["framework"] == want
    rep = html.build(tr, bandwidth=16, time_limit=0.5)
    assert dict(rep.facts)["framework"] == want


def test_pools_outside_line_does_not_contradict_itself(tmp_path, monkeypatch, capsys):
    from pyinterpose.cli import main

    tr = Trace.from_tables(blocks=loop(owner="libc10_cuda.so"), meta={"view": "blocks"})
    tr.blocks["owner"] = tr.blocks["owner"].where(tr.blocks["api"] != "cuMemAlloc_v2", "libcublasLt.so.13")
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: tr)
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["pools", "x.pit"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())   # table cells wrapped
    assert "not pytorch's allocator: owner is pytorch's allocator" not in out
    assert "made outside pytorch's allocator (its blocks: owner libc10_cuda.so (pytorch's allocator))" in out


def test_compare_ratio_is_the_allocators_reserve_over_its_own_live_peak(tmp_path, monkeypatch):
    from pyinterpose.analysis.compare import compare

    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))
    blocks = Trace.from_tables(blocks=loop(), meta={"view": "blocks", "framework": "torch"})
    seg = loop(api="cudaMalloc")
    reserved = Trace.from_tables(blocks=seg, meta={"view": "reserved", "framework": "torch"})
    rb, rr = compare([blocks, reserved], ["b", "r"], bandwidth=16, pools=True, swap=False)["traces"]
    assert rb["allocator_peak_bytes"] == 12 * MiB and rb["outside_allocator_bytes"] == 100 * MiB
    assert rb["reserved_source"] == "simulated: pytorch"
    assert rb["reserved_over_live"] == rb["reserved_bytes"] / (12 * MiB) >= 1.0
    # a reserved view: the reserve is known, what lives inside the segments is not
    assert rr["reserved_bytes"] == 12 * MiB and rr["reserved_over_live"] is None
