"""The reader's streamed parsing: processes whose chunks interleave in the file, a chunk
whose compressed payload is corrupt, and the record buffer growing past its reservation."""
from __future__ import annotations

import zlib

import numpy as np

import pyinterpose
from pyinterpose.trace import records
from pyinterpose.trace import format as fmt
from pyinterpose.trace import reader
from pyinterpose.trace.writer import TraceWriter

O = records.OP
API = {n: i for i, n in enumerate(records.api_names())}


def _allocs(seq0: int, n: int, t0: int, base: int) -> np.ndarray:
    """n cudaMalloc + cudaFree pairs (device kind), sizes 1..n MiB."""
    r = np.zeros(2 * n, dtype=records.event_dtype())
    for k in range(n):
        for j, op in enumerate((O.ALLOC, O.FREE)):
            i = 2 * k + j
            r[i]["t_ns"] = t0 + 10 * i
            r[i]["seq"] = seq0 + i
            r[i]["addr"] = base + (k << 24)
            r[i]["size"] = (k + 1) << 20
            r[i]["op"] = op
            r[i]["api"] = API["cudaMalloc" if op == O.ALLOC else "cudaFree"]
            r[i]["flags"] = 1
    return r


def _write(path, chunks, compress=True):
    w = TraceWriter(str(path), {"command": ["t"], "view": "blocks", "t0_ns": 0}, compress=compress)
    for pid, recs in chunks:
        w.events(pid, recs)
    w.trailer({"exit_status": 0, "processes": []})
    w.close()


def test_interleaved_processes_are_grouped_in_order(tmp_path):
    a1, a2 = _allocs(1, 3, 1000, 0x7000_0000_0000), _allocs(7, 2, 5000, 0x7000_0000_0000)
    b1, b2 = _allocs(1, 4, 2000, 0x7100_0000_0000), _allocs(9, 1, 9000, 0x7100_0000_0000)
    p = tmp_path / "mp.pit"
    _write(p, [(20, b1), (10, a1), (20, b2), (10, a2)])
    raw = reader.read_file(str(p))
    assert sorted(raw.events) == [10, 20]
    assert [len(x) for p_ in (10, 20) for x in raw.events[p_]] == [10, 10]
    assert raw.events[10][0]["seq"].tolist() == list(range(1, 7)) + list(range(7, 11))
    assert raw.events[20][0]["seq"].tolist() == list(range(1, 9)) + [9, 10]
    tr = pyinterpose.load(str(p))
    per_pid = tr.blocks.groupby("pid")["size"].apply(list).to_dict()
    assert sorted(per_pid[10]) == sorted([1 << 20, 2 << 20, 3 << 20, 1 << 20, 2 << 20])
    assert sorted(per_pid[20]) == sorted([1 << 20, 2 << 20, 3 << 20, 4 << 20, 1 << 20])
    assert tr.blocks["freed"].all() and tr.counts["unmatched_free"] == 0


def test_uncompressed_and_growing_buffer(tmp_path, monkeypatch):
    recs = _allocs(1, 500, 1000, 0x7000_0000_0000)
    p = tmp_path / "raw.pit"
    _write(p, [(5, recs[i:i + 100]) for i in range(0, len(recs), 100)], compress=False)
    real = reader._RecordBuffer.__init__
    monkeypatch.setattr(reader._RecordBuffer, "__init__", lambda self, dt, hint: real(self, dt, 0))
    raw = reader.read_file(str(p))                 # starts at 64 KiB, must grow to 64 KB of records
    assert raw.events[5][0].tobytes() == recs.tobytes()
    assert len(pyinterpose.load(str(p)).blocks) == 500


def test_corrupt_compressed_chunk_reads_up_to_it(tmp_path):
    good = _allocs(1, 2, 1000, 0x7000_0000_0000)
    p = tmp_path / "bad.pit"
    _write(p, [(3, good)])
    junk = b"this is not a zlib stream"
    data = p.read_bytes()
    cut = data.rindex(fmt.CHUNK_MAGIC)              # before the trailer
    bad = fmt.CHUNK.pack(fmt.CHUNK_MAGIC, fmt.EVENTS, len(junk), zlib.crc32(junk), fmt.FLAG_ZLIB) + junk
    p.write_bytes(data[:cut] + bad + data[cut:])
    tr = pyinterpose.load(str(p))                   # the old reader raised zlib.error here
    assert len(tr.blocks) == 2
    assert any("corrupt compressed chunk" in w for w in tr.warnings)
