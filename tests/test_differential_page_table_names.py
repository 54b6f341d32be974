"""The [differential] pages name every table as their lines and the app's pane titles do (p₁, not weights_1;
dλ, not dlam), and the λ table's columns are the λ line's terms, on the page and in the app's pane."""

from __future__ import annotations

import re

from qkv_tui import compute
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.edges.export_markdown import to_markdown
from qkv_tui.teach.trace import Trace

from .test_differential_builtin import BUILTIN
from .test_differential_learns_builtin import BUILTIN as LEARNS

INTERNAL = re.compile(r"^\| (\w*_\d|lambda|dlam|ddots|dP2|dO_h|dmixed_m|dgamma_sub|d\w*_[st]|dlambda_\w+) ",
                      re.MULTILINE)


def _corners(md: str) -> list[str]:
    """Each table's corner: the first cell of a header row (the line before a row of dashes)."""
    lines = md.splitlines()
    return [lines[i - 1].split("|")[1].strip() for i, line in enumerate(lines) if line.startswith("| :-")]


def test_no_table_of_either_page_carries_an_internal_name() -> None:
    for path in (BUILTIN, LEARNS):
        md = to_markdown(compute(parse_scenario(path.read_text(encoding="utf-8"), path.name)))
        assert INTERNAL.findall(md) == []
        corners = set(_corners(md))
        assert {"scores₁", "scaled₁", "p₁", "p₂", "λ", "weights", "mixed", "normed", "output"} <= corners
    learns = to_markdown(compute(parse_scenario(LEARNS.read_text(encoding="utf-8"), LEARNS.name)))
    assert {"dλ", "dp₂", "d(λ_q·λ_k)", "dλ_q1", "D₁", "dS₁", "dscores₁", "m", "dO"} <= set(_corners(learns))
    # each name is the one the lines under it use
    assert "| dλ " in learns and "    dλ = Σ (−dweights) ⊙ p₂" in learns
    assert "| dp₂ " in learns and "    dp₂[the,the] = −λ·dweights[the,the]" in learns


def test_the_lambda_tables_columns_are_the_lambda_lines_terms() -> None:
    comp = compute(parse_scenario(BUILTIN.read_text(encoding="utf-8"), BUILTIN.name))
    md = to_markdown(comp)
    header = next(line for line in md.splitlines() if line.startswith("| λ "))
    # the λ line's terms, short enough for the app's pane to fit 80 columns beside the panes it is read with
    assert [c.strip() for c in header.split("|")[2:-1]] == ["q1·k1", "exp₁", "q2·k2", "exp₂", "λ"]
    trace = Trace(comp)  # the app's λ pane reads the same labels
    assert [trace.col_label("lambda", j) for j in range(5)] == ["q1·k1", "exp₁", "q2·k2", "exp₂", "λ"]
    learns = Trace(compute(parse_scenario(LEARNS.read_text(encoding="utf-8"), LEARNS.name)))
    assert [learns.col_label("ddots", j) for j in range(2)] == ["d(λ_q1·λ_k1)", "d(λ_q2·λ_k2)"]
