"""The memory-viz writer reads the block classes through its lookup once made, and lets the Series go
(issue 30: 11 M object pointers at 100 M events, held through the whole write before)."""
from __future__ import annotations

import gc
import weakref

from pyinterpose.analysis import guarded
from pyinterpose.report import memory_viz, memory_viz_stream
from pyinterpose.report.synthetic import training_trace


def test_the_classes_go_before_the_device_traces_are_written(tmp_path, monkeypatch):
    tr = training_trace(iterations=6)
    cl = guarded.block_classes(tr).value
    assert cl is not None and len(cl)
    ref = weakref.ref(cl)
    alive = []
    real = memory_viz_stream.DeviceEvents.__init__

    def events(self, *a, **k):
        gc.collect()
        alive.append(ref() is not None)
        real(self, *a, **k)
    monkeypatch.setattr(memory_viz_stream.DeviceEvents, "__init__", events)
    box = [cl]
    del cl
    out = memory_viz.write_snapshot(tr, str(tmp_path / "s.pickle"), classes=box.pop())
    assert out["trace_entries"] > 0
    assert alive and not any(alive)


def test_the_export_command_does_not_keep_them_either(tmp_path, monkeypatch):
    from pyinterpose.report import exports

    tr = training_trace(iterations=6)
    refs, alive = [], []
    real_classes = guarded.block_classes

    def classes(*a, **k):
        r = real_classes(*a, **k)
        refs.append(weakref.ref(r.value))
        return r
    monkeypatch.setattr(guarded, "block_classes", classes)
    real = memory_viz_stream.DeviceEvents.__init__

    def events(self, *a, **k):
        gc.collect()
        alive.append(refs[-1]() is not None)
        real(self, *a, **k)
    monkeypatch.setattr(memory_viz_stream.DeviceEvents, "__init__", events)
    exports.export(tr, "memory-viz", str(tmp_path / "s.pickle"))
    assert refs and alive and not any(alive)
