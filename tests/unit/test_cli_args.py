"""Issue 12 rows 9-12: every flag is validated the same way — one line on stderr, exit 2, no traceback;
outputs are checked before any work (missing folder, a directory, an unwritable place, an existing file
without -f)."""
from __future__ import annotations

import ast
import glob
import os

import pytest

from conftest import ROOT, run_cli
from pyinterpose.cli import main


def _cli(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    return code, err


def _one_line(code, err):
    assert code == 2, err
    assert "Traceback" not in err
    lines = [l for l in err.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith("pyinterpose: error:"), err
    return lines[0]


@pytest.fixture
def csv(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("id,lower,upper,size\na,0,2,8\nb,1,3,8\n")
    return str(p)


BAD_NUMBERS = [
    # row 9
    ("swap", "t.pit", "--latency-us", "nan"),
    ("swap", "t.pit", "--bandwidth", "1e-300"),
    ("plan", "--csv", "{csv}", "--capacity", "99999999999999999999999"),
    # row 10
    ("report", "t.pit", "--bandwidth", "0"), ("report", "t.pit", "--bandwidth", "-5"),
    ("report", "t.pit", "--bandwidth", "nan"), ("report", "t.pit", "--time-limit", "-1"),
    ("compare", "a.pit", "b.pit", "--bandwidth", "0"), ("compare", "a.pit", "b.pit", "--time-limit", "-1"),
    ("demo", "--bandwidth", "-5"), ("demo", "--bandwidth", "inf"),
    ("pools", "t.pit", "--time-limit", "nan"), ("plan", "--csv", "{csv}", "--capacity", "10", "--time-limit", "nan"),
    ("iterations", "t.pit", "--limit", "-1"),
    ("access", "t.pit", "--bandwidth", "0"), ("access", "t.pit", "--top", "-1"),
    ("swap", "t.pit", "--budget", "1e400"), ("pools", "t.pit", "--capacity", "0"),
    ("export", "t.pit", "--format", "csv", "--large", "-1"), ("bandwidth", "--size", "nan"),
]


@pytest.mark.parametrize("args", BAD_NUMBERS, ids=lambda a: " ".join(a))
def test_bad_numbers_one_line_exit_2(capsys, csv, args):
    line = _one_line(*_cli(capsys, *[a.format(csv=csv) for a in args]))
    assert args[-2] in line  # names the flag


def _outputs(tmp_path, csv):
    d = tmp_path / "dir"
    d.mkdir()
    return [
        ("plan", "--csv", csv, "--capacity", "100", "-o", "/nonexistent/o.csv"),
        ("plan", "--csv", csv, "--capacity", "100", "-o", str(d)),
        ("plan", "--csv", csv, "--capacity", "100", "-o", "/proc/o.csv"),
        ("demo", "-o", "/proc/x"),
        ("swap", "t.pit", "--schedule-csv", "/missing/dir/x.csv"),
        ("run", "-o", "/proc/x.pit", "--", "true"),
        ("report", "t.pit", "-o", "/nonexistent/r.html"),
        ("export", "t.pit", "--format", "csv", "-o", str(d)),
        ("compare", "a.pit", "b.pit", "-o", "/proc/c.html"),
    ]


def test_unwritable_outputs_one_line_exit_2(capsys, tmp_path, csv):
    for args in _outputs(tmp_path, csv):
        line = _one_line(*_cli(capsys, *args))
        assert "None" not in line, line


def test_read_only_directory_is_refused(capsys, tmp_path, csv):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: a mode-0555 directory is still writable")
        _one_line(*_cli(capsys, "plan", "--csv", csv, "--capacity", "100", "-o", str(ro / "o.csv")))
    finally:
        os.chmod(ro, 0o755)


def test_existing_output_needs_force(capsys, tmp_path, csv):
    """Row 11: no silent overwrite; -f overwrites."""
    out = tmp_path / "plan.csv"
    out.write_text("keep me\n")
    line = _one_line(*_cli(capsys, "plan", "--csv", csv, "--capacity", "100", "-o", str(out)))
    assert "-f" in line and out.read_text() == "keep me\n"
    sched = tmp_path / "s.csv"
    sched.write_text("keep me\n")
    line = _one_line(*_cli(capsys, "swap", "t.pit", "--schedule-csv", str(sched)))
    assert "-f" in line and sched.read_text() == "keep me\n"
    code, err = _cli(capsys, "plan", "--csv", csv, "--capacity", "100", "-o", str(out), "-f")
    assert code == 0, err
    assert out.read_text().startswith("id,")


def test_plan_csv_size_beyond_int64(capsys, tmp_path):
    """Row 12: a size >= 2**63 is out of range, not "negative"."""
    p = tmp_path / "big.csv"
    p.write_text("id,lower,upper,size\na,0,2,9223372036854775808\n")
    line = _one_line(*_cli(capsys, "plan", "--csv", str(p), "--capacity", "100"))
    assert "out of range" in line and "negative" not in line


@pytest.mark.slow
def test_subprocess_bad_flag_is_one_line():
    cp = run_cli("swap", "t.pit", "--bandwidth", "nan")
    assert cp.returncode == 2 and cp.stderr.count("\n") == 1 and "Traceback" not in cp.stderr


def test_every_command_uses_the_shared_validator():
    """No command parses numbers with a bare float/int (or its own helper): one rule for every flag."""
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "pyinterpose", "cli", "*.py")):
        if path.endswith("_args.py"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.keyword) and node.arg == "type" and isinstance(node.value, ast.Name) \
                    and node.value.id in ("float", "int"):
                offenders.append(f"{os.path.basename(path)}:{node.value.lineno}")
    assert offenders == []
