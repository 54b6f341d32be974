"""A worksheet's printed chain: every table as it is printed, each computed from the printed tables before it.

A computed table is worked from the numbers *printed* before it (rounded to the page's decimals),
then rounded itself, so a student who works from the page lands on the printed number. The
inputs are printed exactly as the scenario gives them; the cos/sin table of RoPE and rounded
ALiBi slopes are printed with the digits the results need. Each stage builds its own tables
(``worksheet_tables`` in its module of :mod:`qkv_tui.teach.stages`); this walks them in the trace's order.
"""

from __future__ import annotations

from qkv_tui.core.engine import Computation
from qkv_tui.edges.worksheet_backward import backward_tables
from qkv_tui.kernels.rope import pairs
from qkv_tui.teach.stages.printed import PrintedChain, Table, exact, idx, kv_owners
from qkv_tui.teach.trace import Trace

__all__ = ["Table", "chain", "exact", "idx", "kv_owners", "pairs"]


def chain(comp: Computation, d: int) -> list[Table]:
    """Every table of the page, in page order (the inputs among them, marked ``given``)."""
    printed = PrintedChain(comp, d)
    for spec, head in Trace(comp).walk():
        printed.add(spec.worksheet_tables(printed, head))
    if comp.scenario.backward is not None:  # the backward tables after the forward's (edges/worksheet_backward.py)
        printed.add(backward_tables(printed))
    return printed.tables + printed.late  # the slopes and sinks after the weights
