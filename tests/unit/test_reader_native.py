"""The native record pass (native/reader, used by ``pyinterpose.load``) builds exactly the tables of the
former pure-numpy builder, kept in ``reader_reference.py`` (its call-site part written from the format spec, so
frames and stacks compare by content, not id): every table, dtype, row order, count,
kernel list and warning, on the shipped samples, the real GPU traces, synthetic edge cases (processes
whose chunks interleave, seq disorder, frees without allocations, addresses reused without a free,
accesses of no known block, failed calls) and traces cut short or corrupted.

``PYINTERPOSE_READER_TRACES=a.pit:b.pit`` adds more traces (e.g. the 1 M-event benchmark trace)."""
from __future__ import annotations

import glob
import os
import sys
import zlib

import numpy as np
import pandas as pd
import pytest

import pyinterpose
from pyinterpose.trace import records
from pyinterpose.trace import format as fmt
from pyinterpose.trace import reader
from pyinterpose.trace.writer import TraceWriter

import reader_reference  # noqa: E402  (beside this file: pytest puts tests/unit on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
O = records.OP
API = {n: i for i, n in enumerate(records.api_names())}
TABLES = ["blocks", "accesses", "launches", "copies", "hints", "failures", "markers", "processes", "nvml",
          "reservations", "frames", "stacks"]


def _traces() -> list[str]:
    paths = sorted(glob.glob(os.path.join(ROOT, "samples", "*.pit")))
    paths += sorted(glob.glob(os.path.join(ROOT, "..", "shared", "data", "gpu-traces", "*.pit")))
    paths += [p for p in os.environ.get("PYINTERPOSE_READER_TRACES", "").split(":") if p]
    return paths


def call_stacks(tr) -> dict[int, str]:
    """stack_id -> the call stack it stands for (its frames' (kind, filename, function, line, object), innermost
    first; -1: none). Checks that the ids are dense, that a parent comes before its children and that every
    frame id names a frame."""
    f, st = tr.frames, tr.stacks
    assert f["frame_id"].tolist() == list(range(len(f))) and st["stack_id"].tolist() == list(range(len(st)))
    frames = list(zip(f["kind"].astype(str), f["filename"], f["function"], f["line"].tolist(), f["object"]))
    out: dict[int, tuple] = {-1: ()}
    for i, parent, frame in zip(st["stack_id"].tolist(), st["parent_id"].tolist(), st["frame_id"].tolist()):
        assert -1 <= parent < i and 0 <= frame < len(frames), (i, parent, frame)
        out[i] = (frames[frame],) + out[parent]
    return {i: repr(s) if i >= 0 else "none" for i, s in out.items()}


def by_content(tr, name: str, stacks: dict[int, str]) -> pd.DataFrame:
    """A table with its ids replaced by what they stand for: each reader numbers frames and stacks its own
    way (the reference is written from the format spec), so frames compare as a sorted table without ids,
    stacks as their resolved call stacks, and a table's stack_id as the call stack it names."""
    t = getattr(tr, name)
    if name == "frames":
        return t.drop(columns="frame_id").sort_values(list(t.columns[1:])).reset_index(drop=True)
    if name == "stacks":
        return pd.DataFrame({"stack": sorted(stacks[i] for i in t["stack_id"].tolist())}, dtype=object)
    if "stack_id" in t.columns:
        return t.assign(stack_id=[stacks[i] for i in t["stack_id"].tolist()])
    return t


def assert_same(new, ref, unread: dict[str, list[str]] | None = None) -> None:
    """``unread``: {table: columns} that the reference does not build (records newer than it)."""
    new_stacks, ref_stacks = call_stacks(new), call_stacks(ref)
    for name in TABLES:
        a, b = getattr(new, name), getattr(ref, name)
        assert a.dtypes.equals(b.dtypes), name
        a, b = by_content(new, name, new_stacks), by_content(ref, name, ref_stacks)
        drop = (unread or {}).get(name, [])
        pd.testing.assert_frame_equal(a.drop(columns=drop), b.drop(columns=drop), check_exact=True, obj=name)
    assert new.kernels == ref.kernels
    assert new.counts == ref.counts
    assert new.warnings == ref.warnings
    assert new.meta == ref.meta


def _reference(path: str):
    return reader_reference.build_trace(reader.read_file(path), path=path)


@pytest.mark.parametrize("feed_run", [None, 3], ids=["runs-256", "runs-3"])
@pytest.mark.parametrize("path", _traces(), ids=os.path.basename)
def test_same_tables_as_the_numpy_reader(path, feed_run, monkeypatch):
    """(runs-3: the chunks go to the C pass three at a time, so runs end inside every trace,
    between processes' chunks too)"""
    if not os.path.exists(path):
        pytest.skip(f"{path} not here")
    if feed_run:
        monkeypatch.setattr(reader._Split, "FEED_RUN", feed_run)
    new = pyinterpose.load(path)
    assert len(new.blocks)
    assert_same(new, _reference(path))
    assert_same(reader.build_trace(reader.read_file(path), path=path), _reference(path))


def test_cut_and_corrupted_copies(tmp_path):
    src = os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")
    data = open(src, "rb").read()
    starts = [i for i in range(len(data)) if data.startswith(fmt.CHUNK_MAGIC, i)]
    cuts = {"half": data[:len(data) // 2], "head": data[:starts[3] + 10]}
    bad = bytearray(data)
    bad[starts[len(starts) // 2] + 40] ^= 0xFF          # a payload byte: checksum mismatch
    cuts["crc"] = bytes(bad)
    bad = bytearray(data)
    bad[starts[len(starts) // 3]] = ord("X")             # not a chunk magic
    cuts["magic"] = bytes(bad)
    for name, blob in cuts.items():
        p = tmp_path / f"{name}.pit"
        p.write_bytes(blob)
        new = pyinterpose.load(str(p))
        assert new.warnings, name
        assert_same(new, _reference(str(p)))


def _rec(n):
    return np.zeros(n, dtype=records.event_dtype())


def _synthetic() -> list[tuple[int, np.ndarray]]:
    """Two processes, chunks interleaved; reuse without free, double free, unknown access, failures,
    a seq that goes backwards, a graph launch, copies, hints, markers and strings."""
    out = []
    for pid, base in ((30, 0x7000_0000_0000), (20, 0x7100_0000_0000)):
        r = _rec(24)
        rows = [
            (O.STRING, dict(aux=1, size=5)), (12, dict()),                       # "gemm1"
            (O.ALLOC, dict(addr=base, size=1 << 20, flags=1, api=API["cudaMalloc"])),
            (O.ALLOC, dict(addr=base, size=2 << 20, flags=1, api=API["cudaMalloc"])),   # reuse, no free
            (O.LAUNCH, dict(aux=1, api=API["cudaLaunchKernel"])),
            (O.ACCESS, dict(aux=3, flags=1)), (O.ACCESS, dict(aux=4, flags=1)), (O.ACCESS, dict(aux=99, flags=1)),
            (O.FREE, dict(addr=base, flags=1, api=API["cudaFree"])),
            (O.FREE, dict(addr=base, flags=1, api=API["cudaFree"])),                      # double free
            (O.ALLOC, dict(addr=base + (1 << 30), size=3 << 20, flags=6, api=API["cudaMallocHost"])),
            (O.ALLOC, dict(addr=0, size=1 << 21, flags=1, result=2, api=API["cudaMalloc"])),  # failed
            (O.LAUNCH, dict(aux=7, api=API["cudaLaunchKernel"], result=1)),                   # failed, unknown
            (O.ACCESS, dict(aux=11, flags=1)),
            (O.GRAPH_LAUNCH, dict(addr=0x1234)),
            (O.ACCESS, dict(aux=11, flags=1)),
            (O.COPY, dict(addr=base + (1 << 30), aux=base, size=100, api=API["cudaMemcpyAsync"])),
            (O.ACCESS, dict(aux=11, flags=2)),
            (O.MEMSET, dict(addr=base, size=10, api=API["cudaMemsetAsync"])),
            (O.PREFETCH, dict(addr=base, size=10, aux=0)),
            (O.ADVISE, dict(addr=base, size=10, aux=3, result=1)),
            (O.MARKER, dict(aux=1)),
            (O.ALLOC, dict(addr=base + (2 << 30), size=5 << 20, flags=1, api=API["cudaMalloc"])),  # never freed
            (O.FREE, dict(addr=base + (3 << 30), flags=1, api=API["cudaFree"])),                  # no alloc
        ]
        for i, (op, f) in enumerate(rows):
            r[i]["op"], r[i]["seq"], r[i]["t_ns"] = op, i + 1, 1000 + 10 * i + pid
            for k, v in f.items():
                r[i][k] = v
        raw = r.view(np.uint8).reshape(len(r), 64)
        raw[1, 16:21] = np.frombuffer(b"gemm1", np.uint8)
        out.append((pid, r))
    (p30, r30), (p20, r20) = out
    return [(p30, r30[:6]), (p20, r20[:9]), (p30, r30[6:]), (p20, r20[9:])]


def test_synthetic_edge_cases(tmp_path):
    p = tmp_path / "edge.pit"
    w = TraceWriter(str(p), {"command": ["t"], "view": "blocks", "t0_ns": 0})
    for pid, recs in _synthetic():
        w.events(pid, recs)
    w.trailer({"exit_status": 0, "processes": []})
    w.close()
    new = pyinterpose.load(str(p))
    assert new.counts["unmatched_free"] == 4 and new.counts["unresolved_access"] == 2
    assert len(new.failures) == 6 and new.launches["graph"].sum() == 2
    assert_same(new, _reference(str(p)))


def test_seq_disorder_pairs_in_seq_order(tmp_path):
    """Records of a process out of seq order in the file still pair in seq order."""
    r = _rec(4)
    for i, (op, seq) in enumerate([(O.FREE, 3), (O.ALLOC, 1), (O.ALLOC, 2), (O.FREE, 4)]):
        r[i]["op"], r[i]["seq"], r[i]["t_ns"], r[i]["flags"] = op, seq, 100 * seq, 1
        r[i]["addr"] = 0x1000 if i < 2 else 0x2000
        r[i]["size"] = 64
    p = tmp_path / "dis.pit"
    w = TraceWriter(str(p), {"command": ["t"], "view": "blocks", "t0_ns": 0})
    w.events(1, r)
    w.close()
    new = pyinterpose.load(str(p))
    assert new.blocks["freed"].all() and new.blocks["t_free"].tolist() == [200, 300]   # t0 = the first event
    assert_same(new, _reference(str(p)))


def test_many_chunks_on_threads(tmp_path, monkeypatch):
    """Enough chunks that they are inflated on worker threads, a few per batch; one bad chunk in the
    middle stops there."""
    monkeypatch.setattr(reader, "_BATCH_BYTES", 2000)
    monkeypatch.setattr(reader._Split, "FEED_RUN", 7)       # runs to the C pass end inside batches
    parts = _synthetic()
    pid, recs = 7, np.concatenate([parts[0][1], parts[2][1]])
    p = tmp_path / "many.pit"
    w = TraceWriter(str(p), {"command": ["t"], "view": "blocks", "t0_ns": 0})
    for k in range(400):
        r = recs.copy()
        r["seq"] += 100 * k
        r["aux"][r["op"] == O.ACCESS] += 100 * k
        r["addr"][(r["op"] == O.ALLOC) | (r["op"] == O.FREE)] += k << 32
        w.events(pid, r)
    w.close()
    new = pyinterpose.load(str(p))
    assert new.counts["alloc"] == 400 * 4 and len(new.launches) == 400 * 3
    assert_same(new, _reference(str(p)))
    data = p.read_bytes()
    starts = [i for i in range(len(data)) if data.startswith(fmt.CHUNK_MAGIC, i)]
    junk = b"not zlib"
    bad = fmt.CHUNK.pack(fmt.CHUNK_MAGIC, fmt.EVENTS, len(junk), zlib.crc32(junk), fmt.FLAG_ZLIB) + junk
    q = tmp_path / "many-bad.pit"
    q.write_bytes(data[:starts[250]] + bad + data[starts[250]:])
    new = pyinterpose.load(str(q))
    assert any("corrupt compressed chunk" in x for x in new.warnings)
    assert_same(new, _reference(str(q)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["python", "native"])
def test_call_sites_same_as_the_spec_reference(capture, cbuild, mode):
    """Call sites (FRAME/STACK/SITE/NOTE records) of a workload that allocates from nested Python functions, a
    C library, a Python thread, pthreads without Python (one named like PyTorch's autograd workers) and a
    forked child (which re-writes the definitions it inherited): the reader's frames, stacks and every block's
    call stack are those the spec reference decodes."""
    workload = os.path.join(ROOT, "tests", "py", "stacks_workload.py")
    path, cp = capture([sys.executable, workload, cbuild("stacks_helper", shared=True)], "--stacks", mode)
    assert cp.returncode == 0, cp.stderr
    new = pyinterpose.load(path)
    stacks = call_stacks(new)
    labels = {"python": {"<no Python frames>", "backward (autograd thread)"}, "native": set()}[mode]
    assert len(new.frames) > 5 and len(new.stacks) > 5 and (new.blocks["stack_id"] >= 0).sum() > 5
    assert labels <= set(new.frames["function"])
    assert len(new.processes) == 2 and len({stacks[i] for i in new.blocks["stack_id"]}) > 3
    # the processes' CONTEXT/DEVICE records are newer than the reference (trace/context.py reads them)
    assert_same(new, _reference(path), unread={"processes": ["context", "devices"]})


@pytest.mark.slow
def test_failed_allocations_call_sites_same_as_the_spec_reference(capture, tmp_path):
    """A run that ends out of memory (simtrain --oom final on a 64 MiB simulated GPU, Python stacks): the
    failures' owner and call stack are those the spec reference decodes from the failed ALLOC's SITE."""
    path, cp = capture([sys.executable, "-m", "pyinterpose.examples.simtrain", "--framework", "torch", "--steps",
                        "6", "--oom", "final", "--oom-truth", str(tmp_path / "oom.jsonl")], "--stacks", "python",
                       "--gpu-clock", "off", env={"SIMCUDA_MEMORY_BYTES": str(64 << 20)})   # (no GPU records:
    # the device clock is newer than the reference)
    assert cp.returncode == 1, cp.stderr[-2000:]
    new = pyinterpose.load(path)
    stacks = call_stacks(new)
    failed = new.failures["stack_id"].tolist()
    assert len(failed) >= 2 and all(i >= 0 for i in failed) and all(stacks[i] != "none" for i in failed)
    # the processes' CONTEXT/DEVICE/CLOCK records are newer than the reference
    assert_same(new, _reference(path), unread={"processes": ["context", "devices", "clock", "clock_note",
                                                             "clock_error_ns", "gpu_dropped"]})


# The first read of a large trace (issue 30): the record pass spills its tables and the accesses to files,
# the accesses are resolved a few rows at a time, and (cache on) each table goes to the cache as soon as it is
# built, then comes back memory-mapped.  "private": --no-cache, the tables through files of the process's own
# in TMPDIR, mapped, then removed; "spill": --no-cache where those files cannot be made, tables in memory;
# "cache": the cache written.
READ_MODES = {"private": {"PYINTERPOSE_NO_CACHE": "1", "PYINTERPOSE_SPILL_MIN_BYTES": "0", "PYINTERPOSE_CHUNK_ROWS": "3"},
              "spill": {"PYINTERPOSE_NO_CACHE": "1", "PYINTERPOSE_SPILL_MIN_BYTES": "0", "PYINTERPOSE_CHUNK_ROWS": "3"},
              "cache": {"PYINTERPOSE_CACHE_MIN_BYTES": "0", "PYINTERPOSE_SPILL_MIN_BYTES": "0",
                        "PYINTERPOSE_CHUNK_ROWS": "3"},
              "cache-in-memory": {"PYINTERPOSE_CACHE_MIN_BYTES": "0", "PYINTERPOSE_CHUNK_ROWS": "3"}}


def _edge_traces(tmp_path) -> list[str]:
    """The synthetic edge cases (interleaved processes, unknown accesses, reuse without free, ...), a file out of
    seq order, a sample with CUDA graphs and one with VMM buffers (both rewrite tables after they are built)."""
    import shutil

    p = tmp_path / "edge.pit"
    w = TraceWriter(str(p), {"command": ["t"], "view": "blocks", "t0_ns": 0})
    for pid, recs in _synthetic():
        w.events(pid, recs)
    w.trailer({"exit_status": 0, "processes": []})
    w.close()
    r = _rec(6)
    for i, (op, seq, aux) in enumerate([(O.FREE, 3, 0), (O.ALLOC, 1, 0), (O.ALLOC, 2, 0), (O.LAUNCH, 5, 0),
                                        (O.ACCESS, 6, 1), (O.FREE, 4, 0)]):
        r[i]["op"], r[i]["seq"], r[i]["t_ns"], r[i]["flags"], r[i]["aux"] = op, seq, 100 * seq, 1, aux
        r[i]["addr"] = 0x1000 if i < 2 else 0x2000
        r[i]["size"] = 64
    q = tmp_path / "dis.pit"
    w = TraceWriter(str(q), {"command": ["t"], "view": "blocks", "t0_ns": 0})
    w.events(1, r)
    w.close()
    out = [str(p), str(q)]
    for name in ("graphs-blocks.pit", "jax-attn-reserved.pit"):
        shutil.copy(os.path.join(ROOT, "samples", name), tmp_path / name)
        out.append(str(tmp_path / name))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(READ_MODES))
def test_spilled_and_streamed_first_read_same_tables(mode, tmp_path, monkeypatch):
    import shutil

    from pyinterpose.trace import colcache

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    for k, v in READ_MODES[mode].items():
        monkeypatch.setenv(k, v)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    if mode == "spill":
        monkeypatch.setattr(colcache.Writer, "private", classmethod(lambda cls, path: None))
    spilled = []
    real_spill = reader._Split.spill
    monkeypatch.setattr(reader._Split, "spill", lambda sp, folder: spilled.append(folder) or real_spill(sp, folder))
    for path in _edge_traces(tmp_path):
        ref = _reference(path)
        spilled.clear()
        stale = colcache.cache_dir(path) + ".tmp-999999999"      # a read killed before (no such process)
        os.makedirs(os.path.join(stale, "spill"))
        new = pyinterpose.load(path)
        assert os.path.exists(stale) == (mode in ("spill", "private"))   # removed by the next read that writes the cache
        shutil.rmtree(stale, ignore_errors=True)
        assert len(spilled) == (0 if mode == "cache-in-memory" else 1)
        assert_same(new, ref)
        assert os.path.isdir(colcache.cache_dir(path)) == mode.startswith("cache")
        if mode.startswith("cache"):
            assert_same(colcache.read(path), ref)
        if mode != "spill":     # mapped from the files just written (the private ones unlinked)
            for name in ("blocks", "accesses", "launches"):
                col = getattr(new, name).iloc[:, 0].to_numpy()
                assert len(col) == 0 or any(isinstance(b, np.memmap) for b in _bases(col)), name
        else:
            col = new.blocks["seq_alloc"].to_numpy()
            assert not any(isinstance(b, np.memmap) for b in _bases(col))
        # nothing left behind: no spill folder, no temporary cache folder
        assert os.listdir(tmp) == []
        assert sorted(f for f in os.listdir(tmp_path) if ".picache." in f) == []


def test_no_room_for_the_private_files_reads_into_memory(tmp_path, monkeypatch):
    """--no-cache on a large trace where TMPDIR has no room for the tables' files: the same tables, read
    into memory, and nothing left in TMPDIR."""
    import errno
    import tempfile

    from pyinterpose.trace import colcache

    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    for k, v in READ_MODES["private"].items():
        monkeypatch.setenv(k, v)
    tried = []

    def full(self, a):
        if "pyinterpose-tables-" in self.path:
            tried.append(self.path)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, a)
    real = colcache.NpyAppender.append
    monkeypatch.setattr(colcache.NpyAppender, "append", full)
    path = _edge_traces(tmp_path)[0]
    new = pyinterpose.load(path)
    assert tried                                   # the private files were tried first
    assert_same(new, _reference(path))
    col = new.accesses["seq"].to_numpy()
    assert not any(isinstance(b, np.memmap) for b in _bases(col))
    assert os.listdir(tmp) == []


def _bases(a):
    while a is not None:
        yield a
        a = getattr(a, "base", None)


def test_spill_that_cannot_be_written_is_a_one_line_error(tmp_path):
    """A full disk while the pass spills (here: a file size limit, EFBIG): the command says so in one line."""
    import subprocess

    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "from pyinterpose.cli import main; sys.exit(main(['summary', sys.argv[1], '--no-cache']))")
    env = dict(os.environ, PYINTERPOSE_SPILL_MIN_BYTES="0", TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "samples", "torch-cnn-blocks.pit")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0
    assert "cannot write the reader's temporary files" in r.stderr and "File too large" in r.stderr
    assert "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []          # the spill folder is gone
