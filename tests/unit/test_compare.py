"""analysis.compare rows against hand-computed values; terminal table, HTML and CLI."""
from __future__ import annotations

import base64
import json
import re

import pytest

from pyinterpose.analysis.compare import compare, framework_of, trace_row
from pyinterpose.cli import main
from pyinterpose.report.compare_view import metric_rows, render_html
from pyinterpose.report.synthetic import training_trace
from pyinterpose.trace.model import Trace
from conftest import fake_trace_files

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_cached_bandwidth(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path))


def test_rows_hand_computed():
    a = training_trace(iterations=6, framework="torch")
    b = training_trace(iterations=6, framework="jax", act=16 * MiB, view="reserved", nvml=False)
    cmp = compare([a, b], ["A", "B"], bandwidth=16, pools=False)
    ra, rb = cmp["traces"]
    assert (ra["label"], ra["framework"], ra["view"]) == ("A", "pytorch", "blocks")
    assert (rb["label"], rb["framework"], rb["view"]) == ("B", "jax", "reserved")
    # peak: weights 16 + optimizer 32 + 4 activations + one 4 MiB gradient
    assert ra["peak_live_bytes"] == (16 + 32 + 4 * 8 + 4) * MiB
    assert rb["peak_live_bytes"] == (16 + 32 + 4 * 16 + 4) * MiB
    # reserved: unknown for A without the pools simulation (NVML used memory is the whole GPU's,
    # never called reserved); the allocator's own blocks in a reserved view
    assert ra["reserved_source"] is None and ra["reserved_bytes"] is None
    assert ra["nvml_used_bytes"] == int(a.nvml["used_bytes"].max())
    assert rb["reserved_source"] == "reserved view" and rb["reserved_bytes"] == rb["peak_live_bytes"]
    assert rb["reserved_over_live"] is None    # a reserved view: the live bytes inside are not seen
    # 6 marker steps -> 5 bounded iterations of 12 allocations; the first holds the optimizer state
    assert ra["iterations"] == 5 and ra["allocs_per_iteration"] == 12
    per_it_a = 4 * 8 + 4 * 1 + 4 * 4
    assert ra["bytes_per_iteration"] == (5 * per_it_a + 32) * MiB // 5
    assert ra["blocks"] == 4 + 4 + 6 * 12
    assert ra["size"]["max"] == 8 * MiB and rb["size"]["max"] == 16 * MiB
    assert ra["small_fraction"] == 0.0
    assert ra["ati"]["intervals"] > 0 and ra["swap"]["peak_before"] == ra["peak_live_bytes"]
    assert any("fragmentation" in n for n in ra["notes"]) is False  # pools skipped: no note
    json.dumps(cmp)


def test_small_fraction_and_empty_trace():
    tr = training_trace(iterations=3, workspace=4096)
    r = trace_row(tr, pools=False, swap=False)
    assert r["small_fraction"] == pytest.approx((3 * 4) / len(tr.blocks))
    e = trace_row(Trace.from_tables(), label="empty", pools=False, swap=False)
    assert e["peak_live_bytes"] == 0 and e["blocks"] == 0 and e["size"] is None


def test_framework_guess_and_duplicate_labels():
    t = training_trace(iterations=3)
    t.meta.pop("framework")
    t.meta["command"] = ["python", "-m", "pyinterpose.examples.simtrain", "--framework", "jax"]
    assert framework_of(t) == "jax"
    t.meta["command"] = ["python", "train_tf.py"]
    assert framework_of(t) == "tensorflow"
    cmp = compare([t, t], pools=False, swap=False)
    assert [r["label"] for r in cmp["traces"]] == ["trace", "trace (2)"]


def test_table_and_html():
    a = training_trace(iterations=4)
    b = training_trace(iterations=4, act=2 * MiB)
    cmp = compare([a, b], ["x", "y"], bandwidth=16, pools=False)
    cmp["traces"][0]["fragmentation"] = {"best-fit": 1.0, "caching": 1.25}
    cols, rows = metric_rows(cmp)
    assert cols == ["x", "y"]
    by = {r[0]: r[1:] for r in rows}
    # y: 2 MiB activations are smaller than 4 MiB gradients, so the peak is at the last backward
    # allocation: weights 16 + optimizer 32 + one activation left (2) + four gradients (16)
    assert by["peak live"] == ["84.0 MiB", f"{16 + 32 + 2 + 16}.0 MiB"]
    assert by["pool/bound: caching"] == ["1.250", "-"]
    page = render_html(cmp)
    assert "https://" not in page and "http://" not in page
    imgs = re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 2 and all(b"<svg" in base64.b64decode(i)[:500] for i in imgs)


@pytest.fixture()
def fake_files(monkeypatch):
    made = {"a.pit": training_trace(iterations=4), "b.pit": training_trace(iterations=4, framework="jax")}
    return fake_trace_files(monkeypatch, made)


def test_cli_compare(fake_files, tmp_path, capsys):
    out = tmp_path / "c.html"
    assert main(["compare", "a.pit", "b.pit", "--json", "--no-pools", "--bandwidth", "16", "-o", str(out)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in d["traces"]] == ["a.pit", "b.pit"]
    assert [r["framework"] for r in d["traces"]] == ["pytorch", "jax"]
    assert out.exists()
    assert main(["compare", "a.pit", "b.pit", "--no-pools", "--no-swap", "--labels", "t,j"]) == 0
    text = capsys.readouterr().out
    assert "peak live" in text and " t " in text and "\x1b[" not in text
    assert main(["compare", "a.pit"]) == 2
    assert "at least two" in capsys.readouterr().err
    assert main(["compare", "a.pit", "b.pit", "--labels", "one"]) == 2
    assert "labels" in capsys.readouterr().err


def test_compare_files_loads_one_at_a_time_and_a_repeated_file_once(tmp_path):
    import weakref

    from pyinterpose.analysis.compare import compare_files

    pa, pb = tmp_path / "a.pit", tmp_path / "b.pit"
    pa.write_bytes(b"a")
    pb.write_bytes(b"b")
    (tmp_path / "same.pit").symlink_to(pa)
    make = {str(pa): lambda: training_trace(iterations=4), str(pb): lambda: training_trace(iterations=4, framework="jax")}
    loaded, alive = [], []

    def load(path):
        alive.append(any(r() is not None for r in loaded))   # is an earlier trace still held?
        t = make[path]()
        loaded.append(weakref.ref(t))
        return t

    paths = [str(pa), str(pb), str(tmp_path / "same.pit")]
    cmp, sources = compare_files(paths, ["A", "B", "A again"], bandwidth=16, pools=False, load=load)
    assert [r["label"] for r in cmp["traces"]] == ["A", "B", "A again"]
    assert len(loaded) == 2 and alive == [False, False]       # same.pit is a.pit: loaded once
    want = compare([make[str(pa)](), make[str(pb)]()], ["A", "B"], bandwidth=16, pools=False)["traces"]
    ra, rb, rc = cmp["traces"]
    for got, exp in ((ra, want[0]), (rb, want[1]), ({**rc, "label": "A"}, want[0])):
        assert {k: v for k, v in got.items() if k != "path"} == {k: v for k, v in exp.items() if k != "path"}
    assert [s.meta.get("framework") for s in sources] == ["torch", "jax"]


def test_compare_swap_is_the_best_no_overhead_plan():
    from pyinterpose.analysis import swap as swap_mod

    t = training_trace(iterations=6)
    row = trace_row(t, bandwidth=16, pools=False)
    d = swap_mod.evaluate(t, bandwidth=16)
    no = [r for r in d["strategies"] if r["mode"] == "no-overhead"]
    best = min(no, key=lambda r: r["peak_after"])
    assert row["swap"] == {"peak_before": d["peak_before"], "floor": d["floor"],
                           "best_no_overhead_peak": best["peak_after"],
                           "best_no_overhead_strategy": best["strategy"], "reduction": best["reduction"]}
