"""native/shim/events.h is the one contract between the shim and the reader: every enum in it must give
each name its own value (several features add ring ops and block kinds; a duplicate value compiles in C
and silently makes the reader take one record for another)."""
import os
import re

import pytest

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "native", "shim", "events.h")


def enums(text: str) -> dict[str, dict[str, int]]:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = {}
    for name, body in re.findall(r"enum\s+(\w+)\s*\{(.*?)\}", text, flags=re.S):
        values, nxt = {}, 0
        for item in (x.strip() for x in body.split(",")):
            if not item:
                continue
            m = re.fullmatch(r"(\w+)\s*(?:=\s*(.+))?", item)
            assert m, item
            nxt = int(eval(m.group(2), {}, {})) if m.group(2) else nxt   # plain integer literals only
            values[m.group(1)] = nxt
            nxt += 1
        out[name] = values
    return out


def test_the_parser_sees_a_duplicate():
    assert enums("enum e { A = 1, B = 2, C = 2 };")["e"] == {"A": 1, "B": 2, "C": 2}


@pytest.mark.parametrize("name", ["pi_op", "pi_kind", "pi_access_flags", "pi_site_flags", "pi_apply_record"])
def test_every_enum_value_is_unique(name):
    with open(HEADER) as f:
        values = enums(f.read())[name]
    seen = {}
    for k, v in values.items():
        assert v not in seen, f"{name}: {k} and {seen[v]} are both {v}"
        seen[v] = k
