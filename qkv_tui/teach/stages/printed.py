"""The worksheet's printed chain, as the stages see it: a table as printed, and the tables printed so far.

Every computed table of a worksheet is worked from the numbers *printed* before it (rounded to the
page's decimals), then rounded itself, so a student who works from the page lands on the printed
number. Each stage module builds its own tables from the chain (``StageSpec.worksheet_tables``);
``edges/worksheet/chain.py`` walks the stages and keeps the chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.kernels.policy import PrintedPage
from qkv_tui.kernels.sharing import kv_owners as owners_of

T = TypeVar("T")


@fixed
class Table:
    """One matrix on the page, as printed."""

    key: str  # unique on the page: "X", "W_Q.0", "K_rot.0", "trig.4", "final"
    name: str  # the matrix's name in arithmetic and in the table's corner: "Q", "X̂", "Q'", "scores"
    heading: str  # "Q = X·W_Q"
    stage: str  # the section it sits in: "norm", "project", "rotate", "score", "scale", "softmax", "mix", ...
    head: int | None  # the query head whose section holds it (K/V tables: the first head that reads them)
    values: Matrix  # as printed: computed from the printed operands, then rounded; −∞ where masked
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    given: bool  # an input of the scenario: printed as given, never blank
    blankable: bool  # False for inputs, the cos/sin table and concat (nothing to compute by hand there)
    allow: np.ndarray | None = None  # scaled/weights: False where the mask forbids (−∞ / 0, never blank)
    whole: bool = False  # every value is a whole number before rounding: printed without decimals
    places: int | None = None  # decimals of a table printed with more digits than the page (cos/sin, slopes)
    readers: tuple[int, ...] = ()  # K/V tables of grouped-query heads: the query heads that read them

    def text(self, row: int, col: int, decimals: int) -> str:
        """A cell as printed."""
        value = float(self.values[row, col])
        if self.places is not None:
            return fmt(value, False, self.places)
        if self.given:
            return exact(value)
        return fmt(value, self.whole, decimals)


def exact(x: float) -> str:
    """An input as the scenario gives it: ``1``, ``0.25``, ``-1.5`` (shortest exact form, no rounding)."""
    if x == round(x) and abs(x) < 1e15:
        return str(int(x))
    text = np.format_float_positional(x, trim="-")
    # 1.5e+154 or 1e-300 written out in full would be hundreds of digits: the shortest exact form then
    return text if len(text) <= 24 else repr(float(x))


def idx(count: int) -> tuple[str, ...]:
    return tuple(str(i) for i in range(count))


def kv_owners(sc: Scenario) -> list[int]:
    """For each query head, the first query head that reads the same K/V head with the same weights: its K and V
    are printed once, in that head's section (the engine shares them on the same rule)."""
    return owners_of([sc.kv_head(h) for h in range(len(sc.heads))], sc.heads)


class PrintedChain:
    """The chain so far: every table printed, in page order, and what several stages work out once."""

    def __init__(self, comp: Computation, decimals: int) -> None:
        self.comp = comp
        self.sc = comp.scenario
        self.d = decimals
        self.page = PrintedPage(decimals)
        self.owners = kv_owners(self.sc)
        self.readers = {g: tuple(h for h in range(len(self.sc.heads)) if self.owners[h] == g) for g in set(self.owners)}
        # K/V tables name their readers where query heads share K/V heads
        self.grouped = self.sc.num_kv_heads is not None or any(len(v) > 1 for v in self.readers.values())
        self.tables: list[Table] = []
        self.printed: dict[str, Table] = {}  # computed tables by key, for the stages after them
        self.late: list[Table] = []  # inputs printed after the weights (ALiBi slopes, sinks)
        self._memo: dict[str, Any] = {}

    def add(self, tables: list[Table]) -> None:
        self.tables += tables
        self.printed.update((t.key, t) for t in tables if not t.given)

    def values(self, key: str) -> Matrix:
        """A table printed earlier, as printed."""
        return self.printed[key].values

    def rounded(self, M: Matrix) -> Matrix:
        """A matrix rounded as the page prints it."""
        return self.page.table(M)

    def memo(self, key: str, make: Callable[[], T]) -> T:
        """Something a stage works out once per page (the raw projections, the cos/sin tables)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]  # type: ignore[no-any-return]

    def late_input(self, table: Table) -> None:
        """An input printed after every other (once, however many heads ask)."""
        if all(t.key != table.key for t in self.late):
            self.late.append(table)

    def kv_suffix(self, h: int) -> str:
        """`` (K/V head 1, read by head 1, head 2)`` on a K/V table where query heads share K/V heads."""
        if not self.grouped:
            return ""
        g = self.owners[h]
        return f" (K/V head {self.sc.kv_head(g) + 1}, read by {', '.join(self.sc.heads[x].name for x in self.readers[g])})"

    def kv_readers(self, h: int) -> tuple[int, ...]:
        return self.readers[self.owners[h]] if self.grouped else ()


class PrintedCells(Protocol):
    """The worksheet's answer key, as a stage writes one of its cells' arithmetic with the printed operands."""

    sc: Scenario
    tables: dict[str, Table]  # every table on the page by key
    d: int  # the page's decimals
    owners: list[int]  # query head -> the head whose section prints the K and V it reads

    @property
    def comp(self) -> Computation:
        """The computation the page was made of: what its heads' parts answer (core/part_questions.py)."""
        ...

    def txt(self, key: str, row: int, col: int) -> str:
        """A printed cell as an operand: negatives in parentheses, ``1·(-2)``."""
        ...

    def dot(self, left: str, row: int, right: str, col: int) -> str:
        """``1·2 + 0·(-1)``: a printed row dotted with a printed column."""
        ...

    def bias(self, key: str, col: int) -> str:
        """`` + 0.5`` when the projection has a bias vector on the page, else nothing."""
        ...
