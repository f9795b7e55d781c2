"""The VMM join (pyinterpose.trace.vmm): reserve + create + map -> one logical block per mapping.

Each case writes the raw rows the reader makes from the shim's records (kinds vmm_reserve,
vmm_create, vmm_map; a map's offset into its handle in ``stream``) and checks the joined
blocks against what the program did by construction."""
from __future__ import annotations

import numpy as np
import pandas as pd

from pyinterpose.trace import vmm
from pyinterpose.trace.model import Trace, peak_live_bytes

MiB = 1 << 20
END = 10_000


def raw_trace(rows, accesses=None) -> Trace:
    """rows: (kind, address, size, handle, seq_alloc, seq_free or None, offset)."""
    recs = []
    for i, (kind, addr, size, handle, sa, sf, off) in enumerate(rows):
        recs.append({"block_id": i, "pid": 7, "device": 0, "kind": kind,
                     "api": {"vmm_reserve": "cuMemAddressReserve", "vmm_create": "cuMemCreate",
                             "vmm_map": "cuMemMap"}.get(kind, "cudaMalloc"),
                     "address": addr, "size": size, "handle": handle, "t_alloc": sa * 10,
                     "t_free": (sf if sf is not None else END) * 10, "seq_alloc": sa,
                     "seq_free": sf if sf is not None else END, "freed": sf is not None, "stream": off})
    b = pd.DataFrame(recs)
    b["counts_device"] = b["kind"].isin(["device", "vmm_create"])
    acc = None
    if accesses:
        acc = pd.DataFrame([{"block_id": bid, "pid": 7, "seq": s, "t": s * 10, "kernel": 0, "op": "launch",
                             "flags": 1} for bid, s in accesses])
    return Trace.from_tables(blocks=b, accesses=acc)


def test_jax_style_buffer_is_one_block_and_accesses_follow():
    # reserve 2 MiB, create 2 MiB, map it; a kernel touches the map; unmap, release, free
    tr = raw_trace([
        ("vmm_reserve", 0x7000_0000, 2 * MiB, 0, 1, 9, 0),
        ("vmm_create", 0, 2 * MiB, 0xAB, 2, 8, 0),
        ("vmm_map", 0x7000_0000, 2 * MiB, 0xAB, 3, 6, 0),
        ("device", 0x9000_0000, MiB, 0, 4, None, 0),
    ], accesses=[(2, 5), (3, 5)])
    vmm.join(tr)
    b = tr.blocks
    assert sorted(b["kind"].astype(str)) == ["device", "vmm"]
    v = b[b["kind"] == "vmm"].iloc[0]
    assert (v["address"], v["size"], v["seq_alloc"], v["seq_free"]) == (0x7000_0000, 2 * MiB, 3, 6)
    assert (v["t_alloc"], v["t_free"], bool(v["counts_device"])) == (30, 60, True)
    assert (v["handle_t_create"], v["handle_t_release"], v["api"]) == (20, 80, "cuMemMap")
    assert v["reservation_id"] == 0
    assert list(b["block_id"]) == list(range(len(b)))
    # both accesses kept, the map's now on the vmm block
    acc = tr.accesses.merge(b[["block_id", "kind"]], on="block_id")
    assert sorted(acc["kind"].astype(str)) == ["device", "vmm"]
    r = tr.reservations
    assert len(r) == 1 and r["size"].iloc[0] == 2 * MiB and r["maps"].iloc[0] == 1
    assert r["mapped_peak"].iloc[0] == 2 * MiB
    assert peak_live_bytes(b) == 3 * MiB


def test_one_handle_mapped_twice_counts_its_bytes_once():
    tr = raw_trace([
        ("vmm_reserve", 0x1000_0000, 8 * MiB, 0, 1, 20, 0),
        ("vmm_create", 0, 4 * MiB, 0x11, 2, 19, 0),
        ("vmm_map", 0x1000_0000, 4 * MiB, 0x11, 3, 10, 0),
        ("vmm_map", 0x1040_0000, 4 * MiB, 0x11, 4, 12, 0),   # same bytes, second address
        ("vmm_map", 0x1040_0000, 4 * MiB, 0x11, 13, 15, 0),  # mapped again after the first two went
    ])
    vmm.join(tr)
    b = tr.blocks
    assert (b["kind"] == "vmm").sum() == 3
    assert b.sort_values("seq_alloc")["counts_device"].tolist() == [True, False, True]
    assert peak_live_bytes(b) == 4 * MiB
    assert tr.reservations["mapped_peak"].iloc[0] == 4 * MiB


def test_partial_maps_of_one_handle_count_each_part():
    # one 4 MiB handle mapped as two 2 MiB halves (offsets 0 and 2 MiB) at separate addresses
    tr = raw_trace([
        ("vmm_reserve", 0x2000_0000, 4 * MiB, 0, 1, 20, 0),
        ("vmm_create", 0, 4 * MiB, 0x22, 2, 19, 0),
        ("vmm_map", 0x2000_0000, 2 * MiB, 0x22, 3, 10, 0),
        ("vmm_map", 0x2020_0000, 2 * MiB, 0x22, 4, 10, 2 * MiB),
    ])
    vmm.join(tr)
    assert tr.blocks["counts_device"].tolist() == [True, True]
    assert peak_live_bytes(tr.blocks) == 4 * MiB


def test_expandable_segment_pages_join_into_one_reservation():
    # PyTorch expandable segment: one 64 MiB range; three 20 MiB pages mapped, one unmapped, one more
    seg = 0x4000_0000
    page = 20 * MiB
    rows = [("vmm_reserve", seg, 64 * MiB, 0, 1, None, 0)]
    seq = 2
    for k in range(3):
        rows.append(("vmm_create", 0, page, 0x100 + k, seq, 40 if k == 2 else None, 0))
        rows.append(("vmm_map", seg + k * page, page, 0x100 + k, seq + 1, 39 if k == 2 else None, 0))
        seq += 2
    rows.append(("vmm_create", 0, page, 0x200, 50, None, 0))
    rows.append(("vmm_map", seg + 2 * page, page, 0x200, 51, None, 0))
    tr = raw_trace(rows)
    vmm.join(tr)
    b = tr.blocks
    assert (b["kind"] == "vmm").sum() == 4 and b["counts_device"].all()
    assert (b["reservation_id"] == 0).all()
    assert peak_live_bytes(b) == 3 * page
    r = tr.reservations.iloc[0]
    assert (r["maps"], r["mapped_peak"], bool(r["freed"])) == (4, 3 * page, False)


def test_unmap_never_seen_ends_at_the_reservation_free():
    tr = raw_trace([
        ("vmm_reserve", 0x3000_0000, 2 * MiB, 0, 1, 9, 0),
        ("vmm_create", 0, 2 * MiB, 0x33, 2, None, 0),
        ("vmm_map", 0x3000_0000, 2 * MiB, 0x33, 3, None, 0),
    ])
    vmm.join(tr)
    v = tr.blocks.iloc[0]
    assert bool(v["freed"]) and v["seq_free"] == 9 and v["t_free"] == 90


def test_handle_never_mapped_stays_physical_memory():
    tr = raw_trace([
        ("vmm_create", 0, 6 * MiB, 0x44, 2, 8, 0),
        ("device", 0x9000_0000, MiB, 0, 3, 5, 0),
    ])
    vmm.join(tr)
    b = tr.blocks
    c = b[b["kind"] == "vmm_create"].iloc[0]
    assert bool(c["counts_device"]) and (c["handle_t_create"], c["handle_t_release"]) == (20, 80)
    assert peak_live_bytes(b) == 7 * MiB
    assert len(tr.reservations) == 0


def test_handle_reused_after_release_joins_its_own_create():
    # the driver hands the same handle value out again after a release
    tr = raw_trace([
        ("vmm_reserve", 0x5000_0000, 4 * MiB, 0, 1, 30, 0),
        ("vmm_create", 0, 2 * MiB, 0x55, 2, 6, 0),
        ("vmm_map", 0x5000_0000, 2 * MiB, 0x55, 3, 5, 0),
        ("vmm_create", 0, 4 * MiB, 0x55, 10, 20, 0),
        ("vmm_map", 0x5000_0000, 4 * MiB, 0x55, 11, 19, 0),
    ])
    vmm.join(tr)
    b = tr.blocks.sort_values("seq_alloc")
    assert b["handle_t_create"].tolist() == [20, 100]
    assert b["handle_t_release"].tolist() == [60, 200]


def test_traces_without_vmm_are_untouched():
    tr = raw_trace([("device", 0x9000_0000, MiB, 0, 3, 5, 0)], accesses=[(0, 4)])
    before = tr.blocks.copy()
    vmm.join(tr)
    pd.testing.assert_frame_equal(tr.blocks, before)
    assert (tr.blocks["handle_t_create"] == -1).all() and (tr.blocks["reservation_id"] == -1).all()
    assert len(tr.reservations) == 0
