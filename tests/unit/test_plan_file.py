"""The plan file's own rules (pyinterpose.trace.plan_format): keys, the check, the digest."""
from __future__ import annotations

import copy
import struct

import pytest

from pyinterpose.trace import plan_format as pf
from pyinterpose.errors import PyinterposeError


def test_owner_hash_is_fnv1a_64():
    # published FNV-1a 64-bit test vectors (www.isthe.com/chongo/tech/comp/fnv)
    assert pf.owner_hash("") == 0xCBF29CE484222325
    assert pf.owner_hash("a") == 0xAF63DC4C8601EC8C
    assert pf.owner_hash("foobar") == 0x85944171F73967E8


def _doc():
    req = [
        # two persistent blocks and three per iteration; b and c share an address, never a lifetime
        {"phase": "persistent", "size": 1000, "owner": "x", "site": 7, "ordinal": 0, "offset": 0,
         "slot_size": 1024, "lifetime": [0, 6], "block_id": 0},
        {"phase": "persistent", "size": 1000, "owner": "x", "site": 7, "ordinal": 2, "offset": 1024,
         "slot_size": 1024, "lifetime": [0, 6], "block_id": 1},
        {"phase": "iteration", "size": 512, "owner": "x", "site": 7, "ordinal": 0, "offset": 2048,
         "slot_size": 512, "lifetime": [0, 2], "block_id": 2},
        {"phase": "iteration", "size": 512, "owner": "x", "site": 7, "ordinal": 1, "offset": 2048,
         "slot_size": 512, "lifetime": [2, 4], "block_id": 3},
        {"phase": "iteration", "size": 100, "owner": "y", "site": 9, "ordinal": 0, "offset": 2560,
         "slot_size": 512, "lifetime": [1, 3], "block_id": 4},
    ]
    return {"format": pf.FORMAT, "version": pf.VERSION, "capacity": 3072, "judge_after": 50, "sites": True,
            "iteration": {"boundary": "anchor", "anchor": {"size": 100, "site": 9, "owner": "y"}, "requests": 3},
            "requests": req}


def test_check_accepts_a_consistent_plan():
    pf.check(_doc())


@pytest.mark.parametrize("change, what", [
    (lambda d: d["requests"][3].update(lifetime=[1, 4]), "overlap in time and address"),
    (lambda d: (d.update(capacity=4096), d["requests"][4].update(offset=2816)), "aligned"),
    (lambda d: d.update(capacity=3000), "outside the arena"),
    (lambda d: d["requests"][2].update(slot_size=256, size=512), "smaller"),
    (lambda d: d["requests"][3].update(ordinal=0), "duplicate key"),
    (lambda d: d.update(version=99), "version"),
])
def test_check_refuses(change, what):
    d = copy.deepcopy(_doc())
    change(d)
    with pytest.raises(PyinterposeError, match=what):
        pf.check(d)


def test_digest_layout():
    raw = pf.digest(_doc())
    hdr = struct.unpack_from("<QIIQQQQQQQ", raw, 0)
    magic, version, flags, cap, n_keys, n_slots, a_size, a_site, iter_req, judge = hdr
    assert magic == pf.PLAN_MAGIC and version == pf.VERSION and flags == 0
    assert (cap, a_size, a_site, iter_req, judge) == (3072, 100, 9, 3, 50)
    keys = [struct.unpack_from("<QQIIII", raw, 128 + 32 * i) for i in range(n_keys)]
    slots = [struct.unpack_from("<QQ", raw, 128 + 32 * n_keys + 32 * i) for i in range(n_slots)]
    assert len(raw) == 128 + 32 * n_keys + 32 * n_slots
    # sorted by (size, site, persistent first)
    assert [(k[0], k[1], k[4]) for k in keys] == [(100, 9, 0), (512, 7, 0), (1000, 7, 1)]
    k = {(x[0], x[4]): x for x in keys}
    first, count = k[(1000, 1)][2:4]
    # process-life ordinals 0..2: ordinal 1 is not planned (an empty slot)
    assert count == 3 and slots[first:first + 3] == [(0, 1024), (0, 0), (1024, 1024)]
    first, count = k[(512, 0)][2:4]
    assert slots[first:first + count] == [(2048, 512), (2048, 512)]
