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
