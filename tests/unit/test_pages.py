"""trace.pages: the resident pages of a mapped cache column are given back, and nothing else is touched."""
import mmap

import numpy as np
from pyinterpose.trace import pages

PAGE = mmap.PAGESIZE


def resident(a: np.ndarray) -> int:
    """Pages of ``a`` present in this process, from /proc/self/pagemap (bit 63), read independently."""
    lo = a.ctypes.data // PAGE
    hi = (a.ctypes.data + a.nbytes + PAGE - 1) // PAGE
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo * 8)
        e = np.frombuffer(f.read((hi - lo) * 8), "<u8")
    return int(((e >> np.uint64(63)) & np.uint64(1)).sum())


def mapped(tmp_path, n=64 * PAGE // 8):
    want = np.arange(n, dtype=np.int64) * 7
    np.save(tmp_path / "c.npy", want)
    return np.load(tmp_path / "c.npy", mmap_mode="c"), want


def test_release_gives_back_a_mapped_columns_pages_and_keeps_its_values(tmp_path, monkeypatch):
    monkeypatch.delenv("PYINTERPOSE_KEEP_PAGES", raising=False)
    a, want = mapped(tmp_path)
    assert int(a.sum()) == int(want.sum())          # every page read
    before = resident(a)
    assert before >= 60
    got = pages.release(a)
    assert got >= 60 * PAGE
    assert resident(a) <= 2                         # only the partial pages at either end may stay
    np.testing.assert_array_equal(a, want)          # read again from the file


def test_a_range_drops_only_whole_pages_inside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PYINTERPOSE_KEEP_PAGES", raising=False)
    a, want = mapped(tmp_path)
    a.sum()
    per = PAGE // 8
    pages.release(a, 10 * per, 20 * per)
    assert resident(a[10 * per + per: 20 * per - per]) == 0   # (the column starts past the .npy header:
    assert resident(a[10 * per: 20 * per]) <= 2                # its rows are not page-aligned)
    assert resident(a[: 9 * per]) >= 8
    assert resident(a[20 * per:]) > 0
    np.testing.assert_array_equal(a, want)


def test_anonymous_and_written_pages_are_never_dropped(tmp_path, monkeypatch):
    monkeypatch.delenv("PYINTERPOSE_KEEP_PAGES", raising=False)
    b = np.arange(64 * PAGE // 8, dtype=np.int64)
    assert pages.release(b) == 0
    assert int(b[-1]) == len(b) - 1
    a, want = mapped(tmp_path)
    i = 30 * PAGE // 8
    a[i] = -1                                       # a private copy of that page
    assert pages.release(a) == 0                    # the range holds a written page: left alone
    assert int(a[i]) == -1


def test_keep_pages_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv("PYINTERPOSE_KEEP_PAGES", "1")
    a, _ = mapped(tmp_path)
    a.sum()
    assert pages.release(a) == 0
    assert resident(a) >= 60
