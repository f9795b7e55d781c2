"""The drain's final pass (native/capture/drain.c) on a ring built here by hand: a ticket taken and never
committed (the process killed in between) is filled from the thread intent that names it, and only then;
any other gap is counted lost.  The expected records are the ones written into the ring here, not the
drain's own output."""
from __future__ import annotations

import numpy as np
import pytest

from pyinterpose import _core
from pyinterpose.trace import records

ffi = records._ffi()                 # the contract's types (events.h)
lib = _core.lib
CAP = 16
DT = records.event_dtype()


def _ring():
    hsize = ffi.sizeof("pi_ring_header")
    buf = ffi.new("char[]", hsize + CAP * ffi.sizeof("pi_event"))
    h = ffi.cast("pi_ring_header *", buf)
    h.capacity, h.head, h.tail = CAP, 1, 1
    slots = ffi.cast("pi_event *", buf + hsize)
    return buf, h, slots


def _record(t, op=1, addr=0x1000):
    return dict(t_ns=1000 * t, addr=addr + t, size=256 * t, stream=7, aux=t, tid=42, op=op, api=3, result=0,
                device=0, flags=1)


def _write(ev, rec, seq):
    for k, v in rec.items():
        setattr(ev, k, v)
    ev.seq = seq


def _drain(buf, final=True):
    out = np.zeros(CAP, DT)
    lost = _core.ffi.new("uint64_t *")
    n = lib.pi_drain(_core.ffi.from_buffer(ffi.buffer(buf)), _core.ffi.from_buffer(out), len(out), int(final),
                     lost)
    return out[:n], int(lost[0])


def _rows(out):
    return [{k: int(r[k]) for k in ("seq", "t_ns", "addr", "size", "aux", "op")} for r in out]


def _expect(tickets):
    return [{"seq": t, **{k: v for k, v in _record(t).items() if k in ("t_ns", "addr", "size", "aux", "op")}}
            for t in tickets]


@pytest.mark.parametrize("intent_ticket,filled", [(3, True), (None, False), (4, False)])
def test_a_taken_ticket_is_filled_from_the_intent_that_names_it(intent_ticket, filled):
    buf, h, slots = _ring()
    for t in (1, 2, 4, 5):                    # ticket 3 taken, its record never committed
        _write(slots[t % CAP], _record(t), t)
    _write(slots[3 % CAP], _record(3 + CAP, addr=0xdead), 3 - CAP + CAP)   # a stale slot of an older lap...
    slots[3 % CAP].seq = 0                                                  # ...never committed on this one
    h.head = 6
    if intent_ticket is not None:
        h.intents_used = 2
        _write(h.intents[1].rec[0], _record(intent_ticket), 0)
        h.intents[1].ticket, h.intents[1].n = intent_ticket + 1, 1
        h.intents[1].state = 1                 # PI_INTENT_BUILT
    out, lost = _drain(buf)
    if filled:
        assert _rows(out) == _expect([1, 2, 3, 4, 5]) and lost == 0
    else:
        assert _rows(out) == _expect([1, 2, 4, 5]) and lost == 1


def test_an_intent_is_used_only_in_the_final_pass_and_only_while_built():
    buf, h, slots = _ring()
    for t in (1, 2):
        _write(slots[t % CAP], _record(t), t)
    h.head = 4                                 # 3 outstanding: a live process may still commit it
    h.intents_used = 1
    _write(h.intents[0].rec[0], _record(3), 0)
    h.intents[0].ticket, h.intents[0].n = 4, 1
    h.intents[0].state = 1
    out, lost = _drain(buf, final=False)
    assert _rows(out) == _expect([1, 2]) and lost == 0
    h.intents[0].state = 0                     # its writer committed and moved on: not a record to trust
    out, lost = _drain(buf, final=True)
    assert _rows(out) == [] and lost == 1


def test_a_two_record_intent_fills_both_tickets_and_no_more():
    """An allocation and its SITE record (shim.c pi_writer_stage): tickets 2 and 3 taken, neither committed;
    ticket 4 (another thread's, never committed, no intent) stays lost."""
    buf, h, slots = _ring()
    for t in (1, 5):
        _write(slots[t % CAP], _record(t), t)
    h.head = 6
    h.intents_used = 1
    for i in range(2):
        _write(h.intents[0].rec[i], _record(2 + i), 0)
    h.intents[0].ticket, h.intents[0].n, h.intents[0].state = 3, 2, 1
    out, lost = _drain(buf)
    assert _rows(out) == _expect([1, 2, 3, 5]) and lost == 1


def test_a_held_intent_fills_a_launch_and_its_access_slots_as_interrupted():
    """A launch with two accesses (shim.c pi_writer_open_held): tickets 2..4 taken, killed before its
    slots were marked held; the drain gives ticket 2 the launch as interrupted and 3, 4 NONE records."""
    buf, h, slots = _ring()
    _write(slots[1], _record(1), 1)
    _write(slots[5], _record(5), 5)
    h.head = 6
    h.intents_used = 1
    launch = dict(_record(2, op=records.OP.LAUNCH), result=-1000)
    _write(h.intents[0].rec[0], launch, 0)
    h.intents[0].ticket, h.intents[0].n, h.intents[0].state = 3, 3, 2      # PI_INTENT_HELD
    out, lost = _drain(buf)
    assert lost == 0 and [int(x) for x in out["seq"]] == [1, 2, 3, 4, 5]
    assert [int(x) for x in out["op"]] == [1, records.OP.LAUNCH, records.OP.NONE, records.OP.NONE, 1]
    assert [int(x) for x in out["result"][1:4]] == [-1000] * 3
    assert int(out["addr"][1]) == launch["addr"] and int(out["addr"][2]) == 0 and int(out["tid"][3]) == 42
