"""What the repository says about itself is true: the number of committed sample traces the README
and docs/gpu-validation.md state, the licence pyproject declares (its text is in LICENSE and
shipped)."""
from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten".split())}


def _read(*p):
    with open(os.path.join(ROOT, *p), encoding="utf-8") as f:
        return f.read()


def test_sample_count_stated_in_readme_and_docs():
    n = len(glob.glob(os.path.join(ROOT, "samples", "*.pit")))
    assert n > 0
    for doc in (("README.md",), ("docs", "gpu-validation.md"), ("samples", "README.md")):
        text = " ".join(_read(*doc).split())
        said = re.findall(r"\b(\w+) (?:of them are committed in `samples/`|small traces copied)", text, re.I)
        assert said, doc
        assert all(WORDS[w.lower()] == n for w in said), (doc, said, n)


def test_licence_file_matches_pyproject():
    text = _read("LICENSE")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    py = _read("pyproject.toml")
    assert re.search(r'^license = \{text = "Apache-2.0"\}', py, re.M)
    assert re.search(r'^license-files = \["LICENSE"\]', py, re.M)
    assert "[LICENSE](LICENSE)" in _read("README.md")


def _declared_dependencies() -> list[str]:
    py = _read("pyproject.toml")
    block = py.split("dependencies = [", 1)[1].split("]", 1)[0]
    return [re.split(r"[<>=!~\[ ]", d.strip().strip('",'))[0] for d in re.findall(r'"([^"]+)"', block)]


def test_every_dependency_is_listed_and_justified_in_the_readme():
    """The README's dependency table names each declared dependency with its licence and use;
    uplot-python's entry says what it brings (IPython, msgpack) and why no other package."""
    deps = _declared_dependencies()
    assert "uplot-python" in deps and "numpy" in deps
    section = _read("README.md").split("## Dependencies", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith("| package")]
    listed = {n.strip() for r in rows for n in r.split("|")[1].split(",")}
    assert set(deps) <= listed, set(deps) - listed
    for word in ("IPython", "msgpack", "LGPL", "Apache-2.0", "MIT", "youplot", "metaflow-card-uplot"):
        assert word in section, word


def test_the_report_uses_only_uplots_files_from_uplot_python():
    """Only the static files are read (no import of the wrapper's Python code, which needs IPython)."""
    import sys

    from pyinterpose.report import timeline

    before = set(sys.modules)
    js = timeline.chart_js()
    if js is None:
        import pytest
        pytest.skip("uplot-python not installed")
    assert "uPlot" in js and len(js) > 50_000
    new = {m for m in set(sys.modules) - before if m == "uplot" or m.startswith(("uplot.", "IPython", "msgpack"))}
    assert new == set()
