"""The csv export of one long trace fanned out per iteration range (issue 30), byte for byte the serial text.

A row's CSV text is its own (report.csv_fast formats every field from the row alone), so the blocks
table's rows ``[0, n)`` written as consecutive ranges, one file each, and joined in order are the serial
file.  The parent cuts the rows at iteration starts (pyinterpose.analysis.fanout.row_ranges), looks up
each row's class once (a small code per row, the classes' distinct texts once), and maps
:func:`csv_range_task` over the ranges on the executor of ``fanout.using`` (the local pool, or Dask).  A
task gets plain values: the trace's path, its row range, the range's class codes and the part file to
write (beside the output: on Dask the workers must see that directory too); it loads the trace from its
columnar cache (memory-mapped), formats its rows a chunk at a time (giving the mapped pages back) and
returns the part's size.  The first part starts with the header and becomes the output: the parent appends
each other part to it (``copy_file_range``: the text does not pass through its memory), removes it, and
renames the first over the target (whole or not at all, as pyinterpose.outfile).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import types

import numpy as np

from ..analysis import fanout
from ..outfile import _umask
from ..trace.pages import release
from ..trace.chunking import spans
from .csv_fast import frame_plans, header_text, lookup_plan, write_rows

_PIECE = 1 << 20


def _class_plan(codes: np.ndarray, lo: int, values: list):
    """The class column's plan over rows ``[lo, lo + len(codes))`` (absolute row numbers)."""
    return lookup_plan(lambda r0, r1: codes[r0 - lo:r1 - lo].astype(np.int64), values)


def csv_range_task(item: tuple) -> int:
    """Rows ``[lo, hi)`` of the blocks table of the trace at ``path`` as CSV text into ``part``, after
    ``head`` (the header, for the first range; else empty); ``values``/``codes``: the class column
    (None: none).  Returns the bytes written."""
    from ..trace.reader import load

    path, part, head, lo, hi, values, codes = item
    blocks = load(path).blocks
    extra = None if values is None else [("class", _class_plan(codes, lo, values))]
    got = frame_plans(blocks, extra)
    if got is None:
        raise RuntimeError("csv range task: a frame the fast writer does not handle")
    with open(part, "wb") as f:
        f.write(head)
        write_rows(f, got[1], lo, hi)
    return os.path.getsize(part)


def _append(dst, src_path: str) -> None:
    """Append the file at ``src_path`` to the open binary file ``dst`` (in the kernel where it can)."""
    dst.flush()
    with open(src_path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        done = 0
        try:
            while done < size:
                k = os.copy_file_range(src.fileno(), dst.fileno(), size - done)
                if k == 0:
                    break
                done += k
        except (AttributeError, OSError):
            pass
        if done < size:
            src.seek(done)
            dst.seek(0, os.SEEK_END)
            shutil.copyfileobj(src, dst, 1 << 20)


def write_csv_ranges(trace, path: str, extra_values: list | None, class_codes, iters=None,
                     progress=None) -> bool:
    """Write the blocks table (and the class column: ``extra_values`` and ``class_codes(r0, r1)``, the
    codes of rows ``[r0, r1)``) to ``path`` fanned out per iteration range, when ``fanout`` allows it
    for this trace; False (nothing written) when it does not (the caller writes it serially)."""
    n = fanout.width()
    if not fanout.fannable(trace, n, fanout.EXPORT_MIN_BLOCKS):
        return False
    b = trace.blocks
    extra = None if extra_values is None else [("class", lookup_plan(lambda r0, r1: class_codes(r0, r1),
                                                                    extra_values))]
    got = frame_plans(b, extra)
    if got is None:
        return False
    names = got[0]
    if iters is None:
        iters = types.SimpleNamespace(count=0, boundaries=np.zeros(0, np.int64))   # equal cuts
    ranges = fanout.row_ranges(trace, n, iters=iters)
    if len(ranges) < 2:
        return False
    real = os.path.realpath(path)
    parts_dir = tempfile.mkdtemp(prefix=os.path.basename(real) + ".parts-", dir=os.path.dirname(real))
    try:
        parts = [os.path.join(parts_dir, f"{k:05d}.csv") for k in range(len(ranges))]
        items = []
        dtype = np.int16 if extra_values is not None and len(extra_values) < (1 << 15) else np.int32
        for k, (lo, hi) in enumerate(ranges):
            codes = None
            if extra_values is not None:
                codes = np.empty(hi - lo, dtype)
                for a, z in spans(hi - lo, _PIECE):
                    codes[a:z] = class_codes(lo + a, lo + z)
            items.append((os.path.abspath(trace.path), parts[k], header_text(names) if k == 0 else b"", lo, hi,
                          extra_values, codes))
        release(b["block_id"])           # the ids the codes were looked up by (mapped pages)
        sizes = fanout.fan_map(csv_range_task, items)
        del items
        total = max(1, sum(sizes))
        done = sizes[0]
        # the first part (the header and the first range) becomes the output: the others are appended to
        # it and it is renamed over the target (as outfile.atomic_path does: whole or not at all)
        with open(parts[0], "ab") as f:
            for part, size in zip(parts[1:], sizes[1:]):
                _append(f, part)
                os.unlink(part)
                done += size
                if progress is not None:
                    progress(done / total)
        os.chmod(parts[0], 0o666 & ~_umask())      # the mode a plain open() here would give
        os.replace(parts[0], real)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(parts_dir)
    return True
