"""The report's sections, in page order: every :class:`~pyinterpose.report.reporter.Reporter`, listed
here and nowhere else.  A new section is a reporter in its own module plus one line in this list."""
from __future__ import annotations

from .flame import FLAME
from .growth_section import GROWTH
from .html_sections import ACCESS, BLOCKS, ITERATIONS, MEMORY, POOLS, SITES, SIZES, SWAP
from .oom_fit_sections import FIT, OOM
from .ranks_view import RANKS

REPORTERS = [
    OOM,          # first, when an allocation failed
    GROWTH,       # windowed and flight-recorder traces: the whole run, above the window's detail
    MEMORY,
    SITES,        # when the trace recorded stacks
    FLAME,        # live memory by call stack (peak, each OOM), when the trace recorded stacks
    ITERATIONS,
    SIZES,
    ACCESS,
    POOLS,
    FIT,
    SWAP,
    RANKS,        # when the trace's processes name ranks
    BLOCKS,
]
