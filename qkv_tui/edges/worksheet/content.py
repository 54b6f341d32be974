"""What a worksheet holds, as data: its tables in page order and its numbered blanks.

Kept apart from :mod:`qkv_tui.edges.worksheet.make` (which chooses the blanks) so that
:mod:`qkv_tui.edges.worksheet.render.markdown` can render this without importing the module that calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from qkv_tui.core.engine import Computation
from qkv_tui.edges.worksheet.chain import Table, kv_owners
from qkv_tui.teach import stages
from qkv_tui.teach.stages.common import StageSpec

BLANK = "______"
Cell = tuple[str, int, int]  # (table key, row, col)


@dataclass(frozen=True)
class Blank:
    number: int  # 1-based, in page order
    table: str
    row: int
    col: int
    answer: str  # as it would have been printed
    working: str  # the arithmetic from the printed operands


@dataclass(frozen=True, eq=False)
class WorksheetContent:
    comp: Computation
    tables: tuple[Table, ...]
    blanks: tuple[Blank, ...]
    decimals: int
    # the stages as registered when the page was made (a stage a test registers renders after it is gone)
    specs: Mapping[str, StageSpec] = field(default_factory=lambda: {s.stage.key: s for s in stages.REGISTRY})
    left_out: str = ""  # the rule line naming the tables the page cannot work from its rounded numbers, and why
    # --stages and --heads (edges/worksheet/select.py): the tables the sheet asks about, None for every one, and
    # the words naming the choice; a printed table not asked is given whole, for the asked ones to read
    asked: frozenset[str] | None = None
    chosen: str = ""
    # the gradients of weights [backward] does not train that the choice would have asked and leaves out (select.py)
    idle: tuple[str, ...] = ()
    # --heads: the columns printed of a table of the layer whose columns are the heads' (edges/worksheet/columns.py);
    # a table not named here prints every column
    columns: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def table(self, key: str) -> Table:
        return next(t for t in self.tables if t.key == key)

    def columns_of(self, table: Table) -> tuple[int, ...]:
        """The columns of ``table`` the page prints, by their index in it."""
        return self.columns.get(table.key, tuple(range(len(table.cols))))

    def blank_at(self, key: str, row: int, col: int) -> Blank | None:
        return self._blank_index.get((key, row, col))

    @cached_property
    def _blank_index(self) -> dict[Cell, Blank]:
        return {(b.table, b.row, b.col): b for b in self.blanks}

    @cached_property
    def kv_owners(self) -> list[int]:
        """For each query head, the head whose section prints the K and V it reads."""
        return kv_owners(self.comp.scenario)
