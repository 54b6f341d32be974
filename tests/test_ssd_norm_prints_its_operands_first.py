"""[ssd]'s Norm reads its whole group's gated rows (every head's of the group share one mean square): the page
prints them before head 1's Norm lines use head 2's values, and the app's Norm stage shows them in a pane."""

from __future__ import annotations

import re

import numpy as np

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.core.ssd_part import SsdRecord
from qkv_tui.display.view import View
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.stepper import Position, Stepper
from qkv_tui.teach.trace import Trace

from .test_ssd_builtin import BUILTIN


def _cells(md: str) -> set[str]:
    return {c.strip() for line in md.splitlines() if line.startswith("| **") for c in line.split("|")[2:-1]}


def test_every_operand_of_a_mean_square_line_is_printed_before_it() -> None:
    md = to_markdown(compute(parse_scenario(BUILTIN.read_text(encoding="utf-8"), BUILTIN.name)))
    lines = md.splitlines()
    checked = 0
    for i, line in enumerate(lines):
        m = re.search(r"ms\(gated\[\w+\] over group \d+\) = mean of squares = \((.*)\) / \d+ =", line)
        if m is None:
            continue
        before = _cells("\n".join(lines[:i]))
        for term in m.group(1).split(" + "):
            a = term.split("·")[0].strip("()")
            assert a in before or f"{float(a):.3f}" in before, (line, a)
            checked += 1
    assert checked >= 12  # both heads, three rows each, two operands each


def test_the_norm_stage_shows_the_groups_gated_rows() -> None:
    comp = compute(parse_scenario(BUILTIN.read_text(encoding="utf-8"), BUILTIN.name))
    trace = Trace(comp)
    view = View(trace)
    pos = Stepper(trace).stage(Position(0, 0), trace.stage_keys.index("ssd_norm") + 1)
    focus, _ = view.panes(pos)
    assert [p.key for p in focus] == ["ssd_group@0", "output@0"]
    gates = [hr.need(SsdRecord).gate for hr in comp.heads]
    assert all(g is not None for g in gates)
    # both heads' own gated columns (each from its own Gate stage), side by side
    np.testing.assert_array_equal(trace.matrix("ssd_group", 0), np.hstack([g.gated for g in gates if g]))
    assert trace.op(pos.index).operands[0].matrix == "ssd_group"
