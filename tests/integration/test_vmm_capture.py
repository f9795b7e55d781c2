"""VMM buffers captured for real (the shim on simcuda): each mapping is one logical block, physical
bytes count once, accesses resolve to the mapping.  Ground truth: what tests/c/vmm_workload.c says
it did."""
from __future__ import annotations

import pyinterpose
from conftest import last_json_line
from pyinterpose.trace.model import peak_live_bytes
import pytest

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

MiB = 1 << 20


def test_vmm_buffers_are_one_block_each(capture, cbuild):
    path, cp = capture([cbuild("vmm_workload")])
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    b = tr.blocks
    assert set(b["kind"].astype(str)) == {"vmm"}, b["kind"].value_counts()
    assert len(b) == truth["maps"] == 14
    assert len(tr.reservations) == truth["reservations"]
    assert b["freed"].all() and (b["handle_t_create"] >= 0).all()
    assert (b["handle_t_create"] <= b["t_alloc"]).all() and (b["handle_t_release"] >= b["t_free"]).all()
    # one handle mapped twice counts once; two halves of one handle count both
    assert peak_live_bytes(b) == truth["physical_peak"] == 8 * MiB
    assert int(b.loc[~b["counts_device"], "size"].sum()) == 4 * MiB
    # every access of every launch resolved to a mapping, none lost
    assert len(tr.accesses) == truth["accesses"] and tr.counts["unresolved_access"] == 0
    assert tr.accesses["block_id"].isin(b["block_id"]).all()
    # the expandable segment: 5 pages in one reservation, 4 mapped at once
    seg = tr.reservations.sort_values("maps").iloc[-1]
    assert (seg["maps"], seg["mapped_peak"], seg["size"]) == (5, 8 * MiB, 32 * MiB)
    # every mapping was touched by some kernel, except the segment's page 2 (interior pointers
    # landed on pages 0, 1, 3 and 4)
    untouched = b[~b["block_id"].isin(tr.accesses["block_id"])]
    assert untouched["address"].tolist() == [int(seg["address"]) + 4 * MiB]
