"""A worksheet's printed chain: every table as it is printed, each computed from the printed tables before it.

A computed table is worked from the numbers *printed* before it (rounded to the page's decimals),
then rounded itself, so a student who works from the page lands on the printed number. The
inputs are printed exactly as the scenario gives them; the cos/sin table of RoPE and rounded
ALiBi slopes are printed with the digits the results need. Each stage builds its own tables
(``worksheet_tables`` in its module of :mod:`qkv_tui.teach.stages`); this walks them in the trace's order.
"""

from __future__ import annotations

import itertools

from qkv_tui.core.engine import Computation
from qkv_tui.kernels.rope import pairs as rope_pairs
from qkv_tui.teach.stages.printed import PrintedChain, Table, exact, idx, kv_owners
from qkv_tui.teach.trace import Trace

__all__ = ["Table", "chain", "exact", "idx", "kv_owners", "pairs"]


def pairs(layout: str, d_k: int) -> list[tuple[int, int]]:
    """The dimensions RoPE turns together, pair i first (docs/scenario-format.md, `[rope]`)."""
    return rope_pairs(layout, d_k)


def chain(comp: Computation, d: int) -> list[Table]:
    """Every table of the page, in page order (the inputs among them, marked ``given``)."""
    trace = Trace(comp)
    printed = PrintedChain(comp, d)
    # as the trace walks the stages: a run of per-head stages head after head, the others once
    for per_head, group in itertools.groupby(trace.specs, key=lambda s: s.per_head):
        run = list(group)
        for head in range(len(comp.heads)) if per_head else [None]:
            for spec in run:
                printed.add(spec.worksheet_tables(printed, head))
    return printed.tables + printed.late  # the slopes and sinks after the weights
