"""A memory-mapped columnar cache of a trace's tables, kept beside the trace file.

Loading a large trace inflates every chunk and runs the native record pass; the tables it
makes are then held in anonymous memory whether an analysis reads them or not (at 10 M
events: ~0.45 GB of tables, ~0.9 GB peak while building them).  After a trace is loaded
once, :func:`write` stores every column of every table as a ``.npy`` file in
``<trace>.picache/`` (categoricals as their codes, the categories and the small text
columns in ``manifest.json``), and later loads :func:`read` them memory-mapped: loading
is then a few milliseconds, and a column takes memory only once an analysis touches it
(page cache, given back by the kernel under pressure; never written back — the mapping
is copy-on-write, so a table changed in place changes only this process's copy).

The first read of a trace writes the cache while it builds the tables (:class:`Writer`, used by
``trace/reader.py``): each table is written as soon as it is made and dropped, the accesses a chunk
of rows at a time (:class:`NpyAppender`), so that read never holds every table at once; the
trace it returns is then mapped from the cache.

The cache is used only when it was made from this very file (size and modification time
in nanoseconds) by this very reader (a fingerprint of the ``trace`` package's sources and
the native reader): anything else is rebuilt.  It is written only for traces of at least
``PYINTERPOSE_CACHE_MIN_BYTES`` (default 32 MiB: smaller traces load in about a second),
never for a trace still being written, and silently not where the folder beside the trace
cannot be written.  ``--no-cache`` on any analysis command (``PYINTERPOSE_NO_CACHE=1``)
neither reads nor writes it.  No pickle: numpy arrays of plain dtypes and JSON only.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import threading

import numpy as np
import pandas as pd
from .model import Trace
from .pages import release

SUFFIX = ".picache"
FORMAT = 1
MIN_BYTES = 32 << 20
OTHER_FIELDS = frozenset({"kernels", "meta", "counts", "warnings", "path", "_derived"})


def _tables() -> tuple:
    """Every field of Trace but OTHER_FIELDS: its tables (a table added to the model is stored too)."""
    import dataclasses


    return tuple(f.name for f in dataclasses.fields(Trace) if f.name not in OTHER_FIELDS)


TABLES = _tables()


def _knows_every_field(trace) -> bool:
    """Every field of the trace that is not in OTHER_FIELDS is a table (else: no cache is written)."""
    return all(isinstance(getattr(trace, n, None), pd.DataFrame) for n in TABLES)
_fingerprint: str | None = None


def enabled() -> bool:
    """False when ``--no-cache`` (``PYINTERPOSE_NO_CACHE``) turned the cache off."""
    return os.environ.get("PYINTERPOSE_NO_CACHE", "") in ("", "0")


def min_bytes() -> int:
    try:
        return int(os.environ.get("PYINTERPOSE_CACHE_MIN_BYTES", MIN_BYTES))
    except ValueError:
        return MIN_BYTES


def wanted(path: str) -> bool:
    """Whether a load of ``path`` should write its cache (on, and the file large enough)."""
    try:
        return enabled() and os.path.getsize(path) >= min_bytes()
    except OSError:
        return False


def cache_dir(path: str) -> str:
    return path + SUFFIX


def reader_fingerprint() -> str:
    """A digest of the code that builds the tables: the ``trace`` package's sources, the record
    layout and the native library (a cache made by other code is never used)."""
    global _fingerprint
    if _fingerprint is None:
        here = os.path.dirname(os.path.abspath(__file__))
        pkg = os.path.dirname(here)
        h = hashlib.sha1(str(FORMAT).encode())
        files = sorted(glob.glob(os.path.join(here, "*.py")) + glob.glob(os.path.join(pkg, "capture", "records.py"))
                       + glob.glob(os.path.join(pkg, "_core*.so")))
        for f in files:
            h.update(os.path.basename(f).encode())
            with open(f, "rb") as fh:
                h.update(fh.read())
        _fingerprint = h.hexdigest()
    return _fingerprint


def _key(path: str) -> dict:
    st = os.stat(path)
    return {"format": FORMAT, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "reader": reader_fingerprint()}


def _jsonable(x) -> bool:
    """x survives a JSON round trip unchanged (types included)."""
    try:
        return json.loads(json.dumps(x)) == x and _same_types(json.loads(json.dumps(x)), x)
    except (TypeError, ValueError):
        return False


def _same_types(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in b)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b))
    return True


def _table_spec(name: str, df: pd.DataFrame, folder: str, prefix: str | None = None) -> dict | None:
    """Write a table's columns into ``folder`` (files ``<prefix>.<i>.npy``, prefix: the table's
    name); its manifest entry, or None when it cannot be cached."""
    if not isinstance(df.index, pd.RangeIndex) or df.index.start != 0 or df.index.step != 1:
        return None
    cols = []
    for i, c in enumerate(df.columns):
        if not isinstance(c, str):
            return None
        entry = _column_entry(c, df[c], folder, f"{prefix or name}.{i}.npy")
        if entry is None:
            return None
        cols.append(entry)
    return {"rows": len(df), "columns": cols}


def _column_entry(c: str, s: pd.Series, folder: str, fname: str) -> dict | None:
    """Write one column (``s``, named ``c``) as ``folder/fname`` when it has values; its manifest
    entry, or None when it cannot be cached."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        cats = s.cat.categories.tolist()
        if not _jsonable(cats) or str(s.cat.categories.dtype) not in ("object", "str", "string"):
            return None
        np.save(os.path.join(folder, fname), s.cat.codes.to_numpy(), allow_pickle=False)
        return {"name": c, "kind": "category", "file": fname, "categories": cats,
                "ordered": bool(dt.ordered), "cat_dtype": str(s.cat.categories.dtype)}
    if dt == object or str(dt) in ("str", "string"):
        vals = s.tolist()
        if not _jsonable(vals):
            return None
        return {"name": c, "kind": "json", "values": vals, "dtype": str(dt)}
    if isinstance(dt, np.dtype) and dt.kind in "biuf":
        np.save(os.path.join(folder, fname), np.ascontiguousarray(s.to_numpy()), allow_pickle=False)
        return {"name": c, "kind": "array", "file": fname}
    return None


def write(trace, path: str) -> bool:
    """Store ``trace``'s tables in the cache beside ``path``; False when not written (too small,
    disabled, not writable, or something in it that would not come back exactly)."""
    if not wanted(path) or not _knows_every_field(trace):
        return False
    w = Writer.open(path)
    if w is None:
        return False
    try:
        if all(w.table(name, getattr(trace, name)) for name in TABLES):
            return w.finish(trace)
        return False
    finally:
        w.abort()


class Writer:
    """The cache of one trace, written table by table while the reader builds them (the first read
    of a large trace never holds every table at once: trace/reader.py), into a temporary folder
    beside the trace renamed into place by :meth:`finish`.  Tables written can be read back
    memory-mapped (:meth:`mapped`) before the cache is finished."""

    def __init__(self, path: str, tmp: str, key: dict):
        self.path, self.tmp, self.key = path, tmp, key
        self.specs: dict = {}
        self._gen = 0

    @classmethod
    def open(cls, path: str) -> "Writer | None":
        """A writer for the cache of ``path`` (None: the cache is off, or its folder cannot be made)."""
        if not enabled():
            return None
        try:
            key = _key(path)
            _remove_stale(path)
            tmp = f"{cache_dir(path)}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            os.mkdir(tmp)
        except OSError:
            return None
        return cls(path, tmp, key)

    @classmethod
    def private(cls, path: str) -> "Writer | None":
        """A writer of ``path``'s tables into a temporary folder of this process (``TMPDIR``), for a
        large trace read without its cache (``--no-cache``, or a folder the cache cannot be written
        to): the tables are then memory-mapped from it (:meth:`mapped_trace`) and the folder removed
        at once — its files live on while mapped — so nothing is left beside the trace or after the
        process, and the read never holds every table in memory (issue 30: 5.8 GB at 100 M events
        in memory, 2.2 GB through the files).  None when the folder cannot be made."""
        import tempfile

        try:
            return cls(path, tempfile.mkdtemp(prefix="pyinterpose-tables-"), {})
        except OSError:
            return None

    def mapped_trace(self, trace):
        """``trace`` with every table written read back memory-mapped (the others as they are)."""
        tables = {n: self.mapped(n) if self.usable(n) else getattr(trace, n) for n in TABLES}
        return Trace(kernels=trace.kernels, meta=trace.meta, counts=trace.counts, warnings=trace.warnings,
                     path=trace.path, **tables)

    def _prefix(self, name: str) -> str:
        """Files of a table written again (vmm.join, graphs.expand replaced it) get new names: the
        old ones may be mapped (they are unlinked, never overwritten)."""
        if name in self.specs:
            self._gen += 1
            return f"{name}.g{self._gen}"
        return name

    def table(self, name: str, df: pd.DataFrame) -> bool:
        """Write one table (replacing a table written before under that name); False when it
        cannot be cached (the trace then gets no cache: :meth:`finish` says False)."""
        try:
            old = self.specs.get(name)
            spec = _table_spec(name, df, self.tmp, self._prefix(name))
        except OSError:
            spec = None
        if spec is None:
            self.specs[name] = None
            return False
        self.specs[name] = spec
        self._unlink(old)
        return True

    def _unlink(self, spec) -> None:
        for c in (spec or {}).get("columns", []):
            if "file" in c:
                try:
                    os.remove(os.path.join(self.tmp, c["file"]))
                except OSError:
                    pass

    def replace_columns(self, name: str, df: pd.DataFrame, columns: list) -> None:
        """Write ``columns`` of table ``name`` again, from ``df`` (the table, with those columns set
        afresh): plain numeric columns of the table's length only."""
        spec = self.specs.get(name)
        if spec is None:
            return
        for c in columns:
            i, e = next((i, e) for i, e in enumerate(spec["columns"]) if e["name"] == c)
            a = df[c].to_numpy()
            if e["kind"] != "array" or len(a) != spec["rows"] or a.dtype.kind not in "biuf":
                raise ValueError(f"{name}.{c}: not a plain column of the table")
            self._gen += 1
            fname = f"{name}.g{self._gen}.{i}.npy"
            np.save(os.path.join(self.tmp, fname), np.ascontiguousarray(a), allow_pickle=False)
            self._unlink({"columns": [e]})
            spec["columns"][i] = {"name": c, "kind": "array", "file": fname}

    def one_column(self, name: str, i: int, c: str, s: pd.Series) -> dict | None:
        """Write column ``c`` (``s``) of table ``name`` as its ``i``-th, for a table written a
        column at a time (:meth:`streamed` records it); its manifest entry, None when it cannot be
        cached (OSError: it could not be written)."""
        return _column_entry(c, s, self.tmp, f"{name}.{i}.npy")

    def column(self, name: str, i: int, dtype) -> "NpyAppender":
        """A column file of table ``name`` (its ``i``-th column) written chunk by chunk."""
        return NpyAppender(os.path.join(self.tmp, f"{name}.{i}.npy"), dtype)

    def streamed(self, name: str, rows: int, columns: list) -> None:
        """Record a table whose columns were written with :meth:`column`: ``columns`` are the
        manifest entries ({"name", "kind": "array"|"category", "file", ...})."""
        self.specs[name] = {"rows": int(rows), "columns": columns}

    def mapped(self, name: str) -> pd.DataFrame:
        """A table written, read back memory-mapped."""
        return _frame(self.tmp, self.specs[name])

    def usable(self, name: str) -> bool:
        return self.specs.get(name) is not None

    def finish(self, trace) -> bool:
        """Write the manifest (``trace``'s kernels, meta, counts and warnings; every table must be
        written) and move the cache into place.  False when it cannot be (nothing is then kept)."""
        try:
            if any(self.specs.get(n) is None for n in TABLES) or self.key != _key(self.path):
                return False
            extras = {"kernels": list(trace.kernels), "meta": trace.meta, "counts": trace.counts,
                      "warnings": list(trace.warnings)}
            if not all(_jsonable(v) for v in extras.values()):
                return False
            with open(os.path.join(self.tmp, "manifest.json"), "w") as f:
                json.dump({"key": self.key, "tables": {n: self.specs[n] for n in TABLES}, **extras}, f)
            final = cache_dir(self.path)
            if os.path.isdir(final):
                old = f"{final}.old-{os.getpid()}"
                os.rename(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.rename(self.tmp, final)
            self.tmp = None
            return True
        except OSError:
            return False

    def abort(self) -> None:
        """Remove what was written unless :meth:`finish` moved it into place (tables mapped from
        it stay readable: an unlinked file lives on while it is mapped)."""
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def _remove_stale(path: str) -> None:
    """Remove the temporary folders of reads of ``path`` that were killed (their process is gone):
    a 100 M-event read leaves gigabytes of spilled records there."""
    if not os.path.isdir("/proc/self"):
        return
    for d in glob.glob(glob.escape(cache_dir(path)) + ".tmp-*") + glob.glob(glob.escape(cache_dir(path)) + ".old-*"):
        pid = d.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(d, ignore_errors=True)


class NpyAppender:
    """A 1-D ``.npy`` file written in chunks: the header is written again with the final length by
    :meth:`close` (the header of numpy's format is padded so that the length can grow in place)."""

    def __init__(self, path: str, dtype):
        self.path, self.dtype, self.n = path, np.dtype(dtype), 0
        self.f = open(path, "wb")
        self.head = self._header(0)
        self.f.write(self.head)

    def _header(self, n: int) -> bytes:
        import io

        b = io.BytesIO()
        np.lib.format.write_array_header_1_0(b, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                 "fortran_order": False, "shape": (n,)})
        return b.getvalue()

    def append(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a, dtype=self.dtype)
        self.f.write(memoryview(a).cast("B"))
        self.n += len(a)

    def close(self) -> str:
        """Finish the file; its name (relative to its folder)."""
        head = self._header(self.n)
        if len(head) != len(self.head):     # never for any length numpy can hold; checked all the same
            raise OSError(f"{self.path}: npy header grew")
        self.f.seek(0)
        self.f.write(head)
        self.f.close()
        return os.path.basename(self.path)


_NPY_HEADER = threading.Lock()


def load_npy(path: str, mmap_mode: str):
    """``np.load`` of a column file (memory-mapped), one at a time in this process: numpy parses the
    header with ``ast.literal_eval``, and CPython 3.11's AST construction keeps its recursion depth in
    state shared by every thread, so two threads parsing at once (Dask's threaded workers reading the
    cache, a garbage collection's finalizer switching threads in the middle) can raise ``SystemError:
    AST constructor recursion depth mismatch``.  The map itself costs microseconds."""
    with _NPY_HEADER:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)


def _column(folder: str, col: dict):
    kind = col["kind"]
    if kind == "array":
        return np.asarray(load_npy(os.path.join(folder, col["file"]), "c"))
    if kind == "category":
        codes = np.asarray(load_npy(os.path.join(folder, col["file"]), "c"))
        cats = pd.Index(col["categories"], dtype=col.get("cat_dtype", "object"))
        cat = pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats, ordered=col["ordered"]))
        release(codes)      # from_codes read every code to check it: those pages given back (mapped again on use)
        return cat
    if col["dtype"] != "object":
        return pd.array(col["values"], dtype=col["dtype"])
    vals = np.empty(len(col["values"]), dtype=object)     # kept object (pandas would infer str)
    vals[:] = col["values"]
    return pd.Series(vals, dtype=object, copy=False)


def _frame(folder: str, spec: dict) -> pd.DataFrame:
    """One table of a cache folder, memory-mapped."""
    data = {c["name"]: _column(folder, c) for c in spec["columns"]}
    df = pd.DataFrame(data, copy=False) if data else pd.DataFrame(index=pd.RangeIndex(spec["rows"]))
    if len(df) != spec["rows"]:
        raise ValueError("table length")
    return df


def read(path: str):
    """The trace's tables from its cache (memory-mapped), or None when there is no valid cache."""

    if not enabled():
        return None
    folder = cache_dir(path)
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            man = json.load(f)
        if man.get("key") != _key(path):
            return None
        tables = {}
        for name in TABLES:
            tables[name] = _frame(folder, man["tables"][name])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Trace(kernels=man["kernels"], meta=man["meta"], counts=man["counts"], warnings=man["warnings"],
                 path=path, **tables)
