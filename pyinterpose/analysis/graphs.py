"""CUDA graphs in a trace, summarised (the replays themselves are already expanded by
:mod:`pyinterpose.trace.graphs`): how many replays were expanded and how many could not be, the nodes
captured, and the graph memory beside the framework allocator's reserve — the graph pool as the driver
reported it after each replay (reserved, high-water mark) and the memory allocated while a graph was being
captured (PyTorch's private graph pools)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..trace.chunking import spans
from ..trace.pages import release
from ..trace.piecewise import piece_rows, total


def graph_summary(trace) -> dict[str, Any]:
    la, gn, gm, b = trace.launches, trace.graph_nodes, trace.graph_memory, trace.blocks
    # the launches' and blocks' graph columns read a piece at a time, their mapped pages given back (issue 30:
    # at 100 M events ~0.15 GB of them resident at once, the summary's peak)
    launches = total(la["graph"].to_numpy()) if len(la) else 0
    nodes = gn.drop_duplicates(["pid", "graph", "capture_seq"]) if len(gn) else gn
    kinds = {str(k): int(v) for k, v in gn["kind"].value_counts().items() if v} if len(gn) else {}
    in_graph = _nonzero(b["graph"].to_numpy()) if "graph" in b and len(b) else np.zeros(len(b), bool)
    node_blocks = in_graph & _kind_in(b["kind"], ("async", "pool")) if len(b) else in_graph
    pool_blocks = in_graph & ~node_blocks
    return {
        "graph_launches": launches,
        "replays_expanded": int(trace.counts.get("graph_replays", 0)),
        "replays_unexpanded": min(launches, int(trace.counts.get("graph_launches_unexpanded", launches))),
        "graphs": int(len(nodes)),
        "nodes": kinds,
        "memory_node_blocks": int(node_blocks.sum()),
        "private_pool_blocks": int(pool_blocks.sum()),
        "private_pool_bytes": total(b["size"].to_numpy(), pool_blocks) if len(b) else 0,
        "graph_pool_reserved_high": int(gm["reserved_high"].max()) if len(gm) else None,
        "graph_pool_reserved_last": int(gm["reserved"].iloc[-1]) if len(gm) else None,
    }


def _nonzero(col: np.ndarray) -> np.ndarray:
    """``col != 0`` per row (a graph id: 0 outside any graph), a piece of rows at a time."""
    out = np.empty(len(col), bool)
    for lo, hi in spans(len(col), piece_rows()):
        out[lo:hi] = col[lo:hi] != 0
        release(col, lo, hi)
    return out


def _kind_in(col, kinds) -> np.ndarray:
    """bool per row: ``np.isin(col.astype(str), kinds)``, tested once per category of a categorical
    column (no string per row: 8 bytes a block)."""
    if hasattr(col, "cat"):
        cats = np.array([str(c) in kinds for c in col.cat.categories] + ["nan" in kinds], bool)
        codes = col.cat.codes.to_numpy()
        return cats[np.where(codes < 0, len(cats) - 1, codes)]
    return np.isin(col.astype(str).to_numpy(), list(kinds))
