"""A worksheet's printed chain: every table as it is printed, each computed from the printed tables before it.

A computed table is worked from the numbers *printed* before it (rounded to the page's decimals),
then rounded itself, so a student who works from the page lands on the printed number. The
inputs are printed exactly as the scenario gives them; the cos/sin table of RoPE and rounded
ALiBi slopes are printed with the digits the results need. Each stage builds its own tables
(``worksheet_tables`` in its module of :mod:`qkv_tui.teach.stages`); this walks them in the trace's order.
"""

from __future__ import annotations

import warnings

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.part_questions import refusal
from qkv_tui.edges.worksheet.backward.tables import backward_tables, zero_root
from qkv_tui.teach.stages.printed import PrintedChain, Table, exact, idx, kv_owners
from qkv_tui.teach.trace import Trace

__all__ = ["Table", "chain", "exact", "idx", "kv_owners", "page"]

# what float64 arithmetic on the printed (rounded) numbers raises where the exact pass, which --check ran, did not
FLOAT_TROUBLE = (ArithmeticError, RuntimeWarning)
APP = "the app and --export markdown show every {what} of this scenario"


def chain(comp: Computation, d: int) -> list[Table]:
    """Every table of the page, in page order (the inputs among them, marked ``given``)."""
    return page(comp, d)[0]


def page(comp: Computation, d: int) -> tuple[list[Table], str]:
    """Every table of the page, and the rule line saying which it leaves out and why ("" when none).

    The page works from rounded numbers, so its arithmetic can fail where the exact pass that ``--check``
    accepted did not (a norm's root printed as 0 that the backward divides by, a product of rounded values past
    float64): the page then ends before the stage that cannot be worked, and says so, rather than refusing a
    scenario every other command takes."""
    printed = PrintedChain(comp, d)
    sc = comp.scenario
    # the same rule in and out of the command line's arithmetic_policy: a failure raises, never prints nan
    with np.errstate(over="raise", divide="raise", invalid="raise", under="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for spec, head in Trace(comp).walk():
            try:
                printed.add(spec.worksheet_tables(printed, head))
            except FLOAT_TROUBLE as exc:
                where = spec.stage.name + (f" ({comp.heads[head].name})" if head is not None and len(comp.heads) > 1 else "")
                return (printed.tables + printed.late,
                        f"- The page ends before {where}: its tables cannot be worked in float64 from the numbers"
                        f" printed before them ({exc}); {APP.format(what='step')}.")
        if sc.backward is None:
            return printed.tables + printed.late, ""
        # the backward tables after the forward's (edges/worksheet/backward/tables.py)
        # a head's part without printed backward tables yet says so (core/part_questions.py)
        why = refusal(comp.heads, "worksheet backward") or zero_root(printed)
        if why is None:
            try:
                printed.add(backward_tables(printed))
            except FLOAT_TROUBLE as exc:
                why = f"cannot be worked in float64 from the numbers printed before them ({exc})"
    left_out = "" if why is None else (f"- [backward]: this page has the forward pass only; its backward tables {why}"
                                       f" ({APP.format(what='gradient')})")
    return printed.tables + printed.late, left_out  # the slopes and sinks after the weights
