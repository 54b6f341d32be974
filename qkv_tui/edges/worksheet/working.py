"""A worksheet's answer key: the arithmetic of one cell, written with the operands as printed on the page.

Every line reads ``name[row,col] = what it is = the printed numbers = the answer``; typed into a
calculator, the numbers give the answer within one unit of its last digit, because the answer was
computed from exactly those numbers (:mod:`qkv_tui.edges.worksheet.chain`). Each stage writes the
lines of its own tables (``worksheet_line`` in its module of :mod:`qkv_tui.teach.stages`); this holds
the printed cells they read.
"""

from __future__ import annotations

from collections.abc import Mapping

from qkv_tui.core.engine import Computation, compute
from qkv_tui.core.scenario import Scenario
from qkv_tui.edges.worksheet.chain import Table, kv_owners
from qkv_tui.teach import stages
from qkv_tui.teach.stages.common import StageSpec


class Working:
    """The arithmetic of one cell, written with the printed operands (a ``PrintedCells`` for the stages)."""

    def __init__(self, sc: Scenario, tables: dict[str, Table], decimals: int,
                 specs: Mapping[str, StageSpec] | None = None, comp: Computation | None = None) -> None:
        self.sc = sc
        self.tables = tables
        self.d = decimals
        self.owners = kv_owners(sc)
        self.specs = specs if specs is not None else {s.stage.key: s for s in stages.REGISTRY}
        self._comp = comp

    @property
    def comp(self) -> Computation:
        """The computation the page was made of (computed from the scenario where none was given): the stages ask
        its heads' parts what they are (the names Q and K are scored under)."""
        if self._comp is None:
            self._comp = compute(self.sc)
        return self._comp

    def txt(self, key: str, row: int, col: int) -> str:
        """A printed cell as an operand: negatives in parentheses, ``1·(-2)``."""
        text = self.tables[key].text(row, col, self.d)
        return f"({text})" if text.startswith("-") else text

    def dot(self, left: str, row: int, right: str, col: int) -> str:
        width = self.tables[left].values.shape[1]
        return " + ".join(f"{self.txt(left, row, c)}·{self.txt(right, c, col)}" for c in range(width))

    def bias(self, key: str, col: int) -> str:
        """`` + 0.5`` when the projection has a bias vector on the page, else nothing."""
        return f" + {self.txt(key, 0, col)}" if key in self.tables else ""

    def line(self, table: Table, i: int, j: int) -> str:
        """The answer key's line for cell (i, j) of a computed table, as the stage whose table it is writes it."""
        return self.specs[table.stage].worksheet_line(self, table, i, j, table.text(i, j, self.d))
