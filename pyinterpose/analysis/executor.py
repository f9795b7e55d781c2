"""Where analysis work runs: a local process pool (default), this process alone, or a Dask distributed
cluster (``--scheduler tcp://HOST:PORT`` or ``$PYINTERPOSE_SCHEDULER``; Dask is imported only then).

Used by pyinterpose.analysis.job (one task per trace) and pyinterpose.analysis.fanout (one task per
process of one trace); it imports neither, so either can use it.
"""
from __future__ import annotations

import contextlib
import os

from ..errors import PyinterposeError

SCHEDULER_ENV = "PYINTERPOSE_SCHEDULER"


def scheduler_address(given: str | None) -> str | None:
    """--scheduler, else $PYINTERPOSE_SCHEDULER, else None (the local pool)."""
    addr = given if given else os.environ.get(SCHEDULER_ENV, "")
    return addr.strip() or None


def _probe(address: str, timeout_s: float = 3.0) -> None:
    """Fail at once when nothing listens at a tcp:// scheduler address (Dask's client retries a refused
    connection until its 20 s timeout); other schemes are left to Dask."""
    import socket
    from urllib.parse import urlsplit

    if "://" in address and not address.startswith("tcp://"):
        return
    u = urlsplit(address if "://" in address else "tcp://" + address)
    try:
        host, port = u.hostname, u.port
    except ValueError as e:
        raise PyinterposeError(f"--scheduler {address}: {e}")
    if not host or not port:
        return
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise PyinterposeError(f"cannot reach the Dask scheduler at {address}: {e.strerror or e}")


class _DaskExecutor:
    """map() over a Dask distributed cluster (client.map + gather; results in input order)."""

    def __init__(self, address: str):
        _probe(address)             # before importing Dask (seconds on a loaded machine)
        try:
            from distributed import Client  # lazy: Dask distributed only with --scheduler (seconds to import)
        except ImportError:
            raise PyinterposeError("--scheduler needs Dask distributed (pip install 'dask[distributed]')")
        try:
            self.client = Client(address, timeout="20s", set_as_default=False)
        except (OSError, TimeoutError, ValueError) as e:
            raise PyinterposeError(f"cannot reach the Dask scheduler at {address}: {e}")

    def map(self, fn, items):
        futures = self.client.map(fn, list(items), pure=False)
        return self.client.gather(futures)

    def imap(self, fn, items):
        """``map`` yielding each result in input order as it is taken (its future then let go)."""
        futures = self.client.map(fn, list(items), pure=False)
        try:
            for i, f in enumerate(futures):
                r = f.result()
                f.release()
                futures[i] = None
                yield r
        finally:
            for f in futures:
                if f is not None:
                    f.cancel()

    def close(self):
        self.client.close()


class _PoolExecutor:
    def __init__(self, max_workers: int | None):
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["pyinterpose.analysis.job", "pyinterpose.trace.reader"])
        self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=max_workers, mp_context=ctx)

    def map(self, fn, items):
        return list(self.pool.map(fn, items))

    def imap(self, fn, items):
        yield from self.pool.map(fn, items)

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


class _InlineExecutor:
    def map(self, fn, items):
        return [fn(i) for i in items]

    def imap(self, fn, items):
        for i in items:
            yield fn(i)

    def close(self):
        pass


@contextlib.contextmanager
def executor(scheduler: str | None = None, max_workers: int | None = None, n_items: int | None = None):
    """An object with ``map(fn, items) -> list`` (input order; ``imap``: the same results yielded one at
    a time, in input order, as they are taken): Dask when ``scheduler`` names one,
    else a local process pool (this process alone for a single item or ``max_workers=1``)."""
    if scheduler:
        ex = _DaskExecutor(scheduler)
    else:
        n = max_workers or os.cpu_count() or 1
        if n_items is not None:
            n = min(n, n_items)
        ex = _InlineExecutor() if n <= 1 else _PoolExecutor(n)
    try:
        yield ex
    finally:
        ex.close()
