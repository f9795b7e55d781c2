"""The Perfetto export's JSON text, written from the columns (perfetto.chrome_trace_json), is byte for
byte json.dumps of the document chrome_trace() builds as Python objects."""
from __future__ import annotations

import json

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import guarded
from pyinterpose.report import perfetto
from pyinterpose.report.synthetic import training_trace
from conftest import gpu_trace
from test_export import two_device_trace


def test_us_text_is_repr_of_us():
    rng = np.random.default_rng(3)
    vals = [0, 1, -1, 999, 1000, 1001, -999, -1000, -1500, 10 ** 15 - 1, -(10 ** 15) + 1, 10 ** 15, 2 ** 53, -(2 ** 53),
            123456789012345, 10 ** 18]
    vals += rng.integers(-(10 ** 15), 10 ** 15, 20000).tolist() + rng.integers(0, 10 ** 7, 20000).tolist()
    for v in vals:
        assert perfetto._us_text(v) == repr(perfetto._us(v)), v


def same_text(tr, tmp_path, **kw):
    text, counts = perfetto.chrome_trace_json(tr, **kw)
    doc = perfetto.chrome_trace(tr, **kw)
    assert text == json.dumps(doc, separators=(",", ":"), allow_nan=False)
    want: dict[str, int] = {}
    for e in doc["traceEvents"]:
        want[e["ph"]] = want.get(e["ph"], 0) + 1
    assert counts == want
    p = tmp_path / "t.json"
    assert perfetto.write_chrome_trace(tr, str(p), **kw) == want
    assert perfetto.validate(json.loads(p.read_text())) == []


def test_text_equals_objects_synthetic(tmp_path):
    tr = training_trace(iterations=4)
    it = guarded.iterations(tr).value
    cl = guarded.block_classes(tr, iters=it).value
    same_text(tr, tmp_path, iterations=it, classes=cl)
    same_text(tr, tmp_path, iterations=it, classes=cl, large=0, max_points=50, max_kernels=7, max_instants=3)
    same_text(two_device_trace(), tmp_path, large=0)


@pytest.mark.parametrize("name", ["torch-cnn-blocks.pit", "torch-transformer-reserved.pit", "jax-attn-blocks.pit",
                                  "graphs-blocks.pit", "loader-blocks.pit"])
@pytest.mark.slow
def test_text_equals_objects_real_traces(name, tmp_path):
    tr = pyinterpose.load(gpu_trace(name))
    it = guarded.iterations(tr).value
    cl = guarded.block_classes(tr, iters=it).value
    same_text(tr, tmp_path, iterations=it, classes=cl)


def test_us_texts_vectorised():
    rng = np.random.default_rng(4)
    for t in (rng.integers(0, 10 ** 12, 5000), rng.integers(-(10 ** 12), 10 ** 12, 5000),
              np.array([0, -1, 10 ** 15, -5]), np.zeros(0, np.int64)):
        assert perfetto._us_texts(t) == [repr(perfetto._us(int(x))) for x in t]
