"""issue 33.11: `demo --json` prints only JSON on stdout (the simulated program's own line goes to stderr)."""
from __future__ import annotations

import json


def test_demo_json_stdout_is_one_json_object(tmp_path):
    from conftest import run_cli

    cp = run_cli("demo", "--json", "-o", str(tmp_path / "d"))
    assert cp.returncode == 0, cp.stderr
    d = json.loads(cp.stdout)
    assert d["source"] == "simulated torch run"
    assert "simtrain torch:" in cp.stderr
