"""`pyinterpose swap` CLI: JSON shape, schedule CSV that anyone can re-check, one-line errors."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from pyinterpose.analysis import swap
from pyinterpose.cli import main
from pyinterpose.cli.swap import parse_bytes
from pyinterpose.errors import PyinterposeError
from pyinterpose.report.synthetic import training_trace


@pytest.fixture
def synthetic(monkeypatch, tmp_path):
    monkeypatch.setenv("PYINTERPOSE_CACHE_DIR", str(tmp_path / "cache"))
    tr = training_trace(step_ns=1_000_000)          # 1 ms between events: room to hide transfers
    monkeypatch.setattr("pyinterpose.cli._args.load_trace", lambda path, quiet=False: tr)
    return tr


def test_swap_json_and_schedule_csv(synthetic, tmp_path, capsys):
    csv = tmp_path / "sched.csv"
    rc = main(["swap", "x.pit", "--bandwidth", "12", "--latency-us", "10", "--json", "--schedule-csv", str(csv)])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["bandwidth"] == {"h2d_bytes_per_s": 12e9, "d2h_bytes_per_s": 12e9, "latency_s": pytest.approx(1e-5),
                              "source": d["bandwidth"]["source"]}
    assert d["bandwidth"]["source"].startswith("given")
    assert {(r["strategy"], r["mode"]) for r in d["strategies"]} == \
        {(s, m) for s in swap.STRATEGIES for m in swap.MODES}
    sched = pd.read_csv(csv)
    assert list(sched.columns[:8]) == ["strategy", "mode", "block_id", "out_start", "out_end", "in_start",
                                       "in_end", "next_access"]
    per = sched.groupby(["strategy", "mode"]).size()
    for r in d["strategies"]:
        assert per.get((r["strategy"], r["mode"]), 0) == r["swaps"]
    # re-check the CSV from scratch: 12 GB/s + 10 us per transfer, hidden in no-overhead
    size = sched["size"].to_numpy()
    dur = 1e-5 + size / 12e9
    assert (sched["out_end"] - sched["out_start"]).to_numpy() == pytest.approx(dur, abs=1e-8)
    assert (sched["in_end"] - sched["in_start"]).to_numpy() == pytest.approx(dur, abs=1e-8)
    no = sched[sched["mode"] == "no-overhead"]
    assert (no["in_end"] <= no["next_access"] + 1e-9).all() and (no["out_start"] >= no["prev_access"] - 1e-9).all()
    for (s, m), g in sched.groupby(["strategy", "mode"]):
        for a, b in (("out_start", "out_end"), ("in_start", "in_end")):
            g2 = g.sort_values(a)
            assert (g2[a].to_numpy()[1:] >= g2[b].to_numpy()[:-1] - 1e-9).all()


def test_swap_table_output(synthetic, capsys):
    assert main(["swap", "x.pit", "--bandwidth", "12", "--strategy", "vote", "--budget", "70MiB"]) == 0
    out = capsys.readouterr().out
    assert "vote" in out and "budget" in out and "given" in out and "\x1b[" not in out


def test_swap_without_bandwidth_is_one_line(synthetic, capsys):
    assert main(["swap", "x.pit"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "no bandwidth" in err


def test_parse_bytes():
    assert parse_bytes("1024") == 1024
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("512 MiB") == 512 << 20
    with pytest.raises(PyinterposeError):
        parse_bytes("12XB")
