"""``pyinterpose export``: one function per format, one dispatcher.

* ``perfetto``   — Chrome trace JSON (report.perfetto)
* ``memory-viz`` — PyTorch memory snapshot pickle (report.memory_viz)
* ``csv``        — the blocks table (one row per allocation; ``class`` added when
                   the lifetime classifier is available)
* ``minimalloc`` — the steady iteration as a MiniMalloc CSV problem
                   (pyinterpose.analysis.pools.steady_problem / write_minimalloc_csv)
* ``folded``     — the live set by call stack at the peak (or ``moment="oom-N"``) as folded
                   stacks (report.flame, pyinterpose.analysis.flame)
* ``speedscope`` — the same, every moment (peak, each OOM) as speedscope JSON profiles
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ..errors import PyinterposeError
from ..trace.model import Trace
from ..heap import give_back
from ..trace.chunking import chunk_rows
from ..trace.pages import release_frame
from ..analysis import guarded
from ..analysis.pools import steady_problem, write_minimalloc_csv

# The writers below are imported lazily: cli/export.py reads FORMATS at `pyinterpose --help`, and the
# writers pull in trace.stacks, cffi and (flame) matplotlib, which would double that start-up time.
FORMATS = ["perfetto", "memory-viz", "csv", "minimalloc", "folded", "speedscope"]


def blocks_table(trace: Trace, classes: pd.Series | None = None) -> pd.DataFrame:
    b = trace.blocks.copy()
    for c in ("api", "kind"):
        b[c] = b[c].astype(str)
    if classes is not None:
        b["class"] = classes.reindex(b["block_id"].to_numpy()).astype(object).fillna("").to_numpy()
    return b


def write_csv(trace: Trace, path: str, classes: pd.Series | None = None, progress=None,
              iters=None) -> dict[str, Any]:
    """The blocks table (and ``classes`` as a ``class`` column) as ``blocks_table(...).to_csv(path,
    index=False)`` would write it; a long trace inside ``analysis.fanout.using`` is written per
    iteration range (``iters``: the trace's iterations, where the ranges are cut) on the executor
    (report.csv_ranges), the same bytes."""
    from .csv_fast import lookup_plan, write_csv_frame  # lazy: see FORMATS
    from .csv_ranges import write_csv_ranges  # lazy: see FORMATS

    # the text of blocks_table(trace, classes).to_csv(path, index=False), at numpy speed: the
    # categorical columns (and the classes, as one) are written from their codes, so no string
    # per row is made (a category's text is its str, a missing value an empty field, as there);
    # the classes are looked up a chunk of blocks at a time (report.class_lookup)
    b = trace.blocks
    columns = list(b.columns)
    extra = None
    if classes is not None:
        from .class_lookup import ClassLookup  # lazy: see FORMATS

        look = ClassLookup(classes)
        bid = b["block_id"].to_numpy()
        extra = [("class", lookup_plan(lambda r0, r1: look.codes(bid[r0:r1]), look.values))]
        columns.append("class")
    if (classes is None or extra[0][1] is not None) and write_csv_ranges(
            trace, path, None if classes is None else look.values,
            None if classes is None else (lambda r0, r1: look.codes(bid[r0:r1])), iters=iters,
            progress=progress):
        return {"rows": len(b), "columns": columns}
    try:
        write_csv_frame(b, path, extra=extra, progress=progress)
    except ValueError:                 # a class that is not text, or a frame pandas must write
        if classes is not None:
            b = b.assign(**{"class": pd.Categorical(classes.reindex(b["block_id"].to_numpy()))})
        write_csv_frame(b, path, progress=progress)
    return {"rows": len(b), "columns": columns}


def write_minimalloc(trace: Trace, path: str, pid: int | None = None) -> dict[str, Any]:
    df = steady_problem(trace, pid)
    write_minimalloc_csv(df, path)
    return {"buffers": int(len(df))}


def snapshot_process(trace: Trace, pid: int | None = None) -> tuple[Trace, int | None, list[int]]:
    """The one process a memory-viz snapshot holds: ``(view, pid, other pids with device blocks)``.

    A PyTorch snapshot describes one process's allocator; two processes on one GPU each have
    their own address space and can hand out the same addresses, which one snapshot cannot
    tell apart (its replay breaks).  ``pid`` None: the trace's only process with device blocks,
    else its main process (:attr:`Trace.main_pid`; the one with most device bytes when that
    has none).  ``view`` is ``trace`` itself when nothing is left out."""
    b = trace.blocks
    dev = b["counts_device"].to_numpy(bool)
    dev_pids = b["pid"].to_numpy()[dev]
    with_device = sorted(int(p) for p in pd.unique(dev_pids))
    if pid is not None:
        if pid not in trace.pids:
            raise PyinterposeError(f"no process {pid} in the trace (processes: "
                                   f"{', '.join(str(p) for p in trace.pids) or 'none'})")
    elif len(with_device) <= 1:
        return trace, (with_device[0] if with_device else None), []
    else:
        pid = trace.main_pid
        if pid not in with_device:
            sizes = b.loc[dev].groupby("pid", observed=True)["size"].sum()
            pid = int(sizes.idxmax())
    return trace.process_view(pid), pid, [p for p in with_device if p != pid]


def _completeness(trace: Trace) -> dict[str, Any]:
    """What an export says of an incomplete trace (the perfetto and memory-viz files carry it too)."""
    if trace.meta.get("complete", True):
        return {"marked_incomplete": False}
    return {"marked_incomplete": True, "incomplete_reason": str(trace.meta.get("incomplete_reason") or "")}


def _classes_then_writing(classes, writing):
    """The block classes (``classes()``'s second result's value), then the progress line says the writing
    starts: for a writer handed the classes in its call, with no reference kept by the caller."""
    cl = classes()[1].value
    writing(0.0)
    return cl


def export(trace: Trace, fmt: str, path: str, large: int | None = None, pid: int | None = None,
           moment: str | None = None, progress=None) -> dict[str, Any]:
    """Write ``trace`` as ``fmt`` to ``path``; returns a small summary dict.

    ``pid``: memory-viz and minimalloc describe one process (default: see
    :func:`snapshot_process` and ``steady_problem``); perfetto and csv hold every process.
    ``progress``: called as ``progress(fraction, description)`` at each step (fraction None: a step
    whose length is not known), e.g. a progress bar's ``update``."""
    say = progress or (lambda fraction=None, description=None: None)

    def classes() -> tuple[Any, Any]:
        say(None, "finding iterations")
        it = guarded.iterations(trace)
        say(None, "classifying blocks")
        cl = guarded.block_classes(trace, iters=it.value)
        for tab in (trace.blocks, trace.launches, trace.accesses):
            release_frame(tab)      # the cache pages the analyses read: the writer maps what it needs again
        if len(trace.blocks) > chunk_rows():
            give_back()             # the classes' transient arrays (~0.3 GB freed at 100 M events), kept by the heap
        return it, cl

    def writing(fraction: float) -> None:
        say(fraction, f"writing {fmt}")

    if fmt == "perfetto":
        from .block_codes import series_codes  # lazy: see FORMATS
        from .perfetto import write_chrome_trace  # lazy: see FORMATS

        it, cl = classes()
        # the classes as a code per block (issue 30: one or two bytes a block, not the Series' ~16),
        # on a long trace after the heap the analyses freed is given back
        if len(trace.blocks) > chunk_rows():
            give_back()
        codes = None if cl.value is None else series_codes(trace, cl.value)
        del cl
        notes: list[str] = []
        writing(0.0)
        counts = write_chrome_trace(trace, path, iterations=it.value, large=large, classes=codes, notes=notes,
                                    progress=writing)
        return {"events": counts, "iterations_note": it.note, "notes": notes, **_completeness(trace)}
    if fmt == "memory-viz":
        from .memory_viz import write_snapshot  # lazy: see FORMATS

        view, pid, others = snapshot_process(trace, pid)
        # the classes handed to the writer, not held here (it lets them go once its lookup is made)
        return {**write_snapshot(view, path, classes=_classes_then_writing(classes, writing), progress=writing),
                "pid": pid, "other_processes": others, **_completeness(trace)}
    if fmt == "csv":
        it, cl = classes()
        writing(0.0)
        return write_csv(trace, path, classes=cl.value, progress=writing, iters=it.value)
    if fmt == "minimalloc":
        say(None, "the steady iteration")
        return write_minimalloc(trace, path, pid)
    if fmt in ("folded", "speedscope"):
        import os

        from ..analysis.flame import moments  # lazy: see FORMATS
        from .flame import write_folded, write_speedscope  # lazy: see FORMATS

        say(None, "the live set at each moment")
        ms = moments(trace)
        if fmt == "folded":
            return {**write_folded(ms, path, moment), **_completeness(trace)}
        if moment is not None:
            from .flame import pick  # lazy: see FORMATS
            ms = [pick(ms, moment)]
        return {**write_speedscope(ms, path, os.path.basename(path)),
                **_completeness(trace)}
    raise PyinterposeError(f"unknown export format {fmt!r} (choose from {', '.join(FORMATS)})")
