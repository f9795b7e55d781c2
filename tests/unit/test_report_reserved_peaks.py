"""The report on a reserved view names each peak: the framework allocator's reserve and the
blocks made outside it (a synthetic PyTorch-like reserved view: 20 segments + one 100 MiB
library workspace; hand-computed peaks)."""
from __future__ import annotations

from pyinterpose.report import html
from test_owners import torch_like

MiB = 1 << 20


def test_reserved_view_facts_split_allocator_and_libraries():
    tr = torch_like(view="reserved")
    tr.blocks["api"] = tr.blocks["api"].astype(str).replace({"cudaMallocAsync": "cudaMalloc"})
    rep = html.build(tr, bandwidth=16, time_limit=0.5)
    facts = dict(rep.facts)
    assert facts["peak reserved by pytorch's allocator"] == f"12.0 MiB ({12 * MiB:,} B; 20 segments)"
    assert facts["peak outside the allocator (libraries)"] == "100.0 MiB (1 blocks)"
    assert facts["peak of both together"] == "112.0 MiB"
    assert rep.headlines["allocator_peak_bytes"] == 12 * MiB
    assert rep.headlines["outside_allocator_peak_bytes"] == 100 * MiB
    mem = dict(next(s for s in rep.sections if s.title == "Memory over time").facts)
    assert mem["GPU 0 segments still reserved by pytorch's allocator"] == "0 (0 B)"
    assert mem["GPU 0 library blocks never freed (outside the allocator)"] == "1 (100.0 MiB)"
