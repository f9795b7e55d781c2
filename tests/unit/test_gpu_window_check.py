"""scripts/gpu_window_check.py's comparison, on hand-written snapshots (the GPU run itself needs a GPU)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mod():
    spec = importlib.util.spec_from_file_location("gpu_window_check", os.path.join(ROOT, "scripts", "gpu_window_check.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_segments_equal_needs_every_address_and_size():
    m = _mod()
    segs = [{"address": 0x7F0000000000, "total_size": 2 << 20}, {"address": 0x7F0000200000, "total_size": 20 << 20}]
    assert m.segments_equal([(0x7F0000200000, 20 << 20), (0x7F0000000000, 2 << 20)], segs)
    assert not m.segments_equal([(0x7F0000200000, 20 << 20)], segs)                       # one missing
    assert not m.segments_equal([(0x7F0000200000, 20 << 20), (0x7F0000000000, 4 << 20)], segs)  # a size differs


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    m = _mod()
    assert m.main([str(tmp_path / "none.pit"), str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
