"""A part's own backward worksheet: the tables of a head whose record reads itself backwards in place of the one
softmax (differential attention's two maps, λ and the sub-norm), and their answer-key lines.

A part names its ``PartSheet`` on its table's faces (core/variants/common.py Faces ``worksheet_back``); the backward
worksheet (tables.py, lines.py, sgd.py, select.py) asks :func:`part_sheets` for the scenario's and never names a part.
Its module loads the first time a page of a scenario with the part is read backwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from qkv_tui.core.scenario import Scenario
from qkv_tui.core.variants import TABLES
from qkv_tui.core.variants.common import face


@dataclass(frozen=True)
class PartSheet:
    """One part's face on the backward worksheet."""

    # (the printed chain, head index, its HeadResult) -> (the head's records as the page prints them, the head's fields
    # they change), or None where the head has no such part: what core/gradients.py reads of the page
    printed: Callable[[Any, int, Any], tuple[list[object], dict[str, object]] | None]
    # (add a table, the printed chain, head index, the head's printed HeadResult, the Gradients) -> whether it added
    # the head's tables from the gradient at its output down to dQ, dK and dV (the projections' own tables follow)
    tables: Callable[[Any, Any, int, Any, Any], bool]
    # the kinds of table key (before the ".") whose lines it writes, for the heads it added tables of
    kinds: frozenset[str]
    # (cells, table, row, col, answer) -> the answer key's line for a cell of one of its tables
    line: Callable[[Any, Any, int, int, str], str]
    # (scenario) -> its rule lines, after the page's first backward rule
    rules: Callable[[Scenario], list[str]]
    # (scenario) -> what of it the tables leave to the app, for the rule that says so; None: they cover it
    uncovered: Callable[[Scenario], str | None] = lambda sc: None
    # (its table kinds, the app's backward stage that computes them), for --stages (edges/worksheet/select.py)
    stages: tuple[tuple[tuple[str, ...], str], ...] = ()
    # (tables by key, the computation, lr, decimals) -> its SGD step's tables (edges/worksheet/sgd.py)
    sgd_tables: Callable[[dict[str, Any], Any, float, int], list[Any]] | None = None
    # (cells, table, row, col, answer) -> the line of a cell of one of its SGD tables, or None where the table is not its
    sgd_line: Callable[[Any, Any, int, int, str], str | None] | None = None


def part_sheets(sc: Scenario) -> list[PartSheet]:
    """The backward worksheets of the scenario's parts, in the order ``--check`` names the tables."""
    return [face(t.faces.worksheet_back) for t in TABLES
            if t.faces is not None and t.faces.worksheet_back is not None and t.of(sc) is not None]


def part_uncovered(sc: Scenario) -> str | None:
    """What of the scenario's parts the backward tables leave to the app, the first named; None: nothing."""
    return next((why for sheet in part_sheets(sc) if (why := sheet.uncovered(sc)) is not None), None)


def stages_of(sc: Scenario) -> dict[str, str]:
    """Each of the parts' backward table kinds, with the app's backward stage that computes it."""
    return {kind: stage for sheet in part_sheets(sc) for kinds, stage in sheet.stages for kind in kinds}
