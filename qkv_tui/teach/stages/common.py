"""What every stage module is made of: the Stage, an Operation and its Refs, and the StageSpec a module fills in.

A stage module (embed.py, score.py, …) holds one ``StageSpec``: when the stage runs, the segments it adds,
how one of its operations is worked out, the matrices it answers for, and what the screen shows of it (panes,
titles, its part of the formula), its section of the Markdown export, and its worksheet tables and their
answer-key lines. The trace, the display, the quiz and the exports read these generically, so none of them
names a stage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import operand
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.teach.arith import Numbers, agrees, dot_at, shown
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.handcalc import round_to
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table


@fixed(eq=True)
class Stage:
    """A stage as the stage bar and the explanation name it."""

    key: str
    name: str
    meaning: str


@fixed(eq=True)
class Ref:
    """Cells an operation reads or writes: a row, a column, or one cell of a matrix."""

    matrix: str  # X, context_X, W_Q, W_K, W_V, Q, K, V, scores, scaled, weights, output, concat, W_O, final
    head: int | None  # None for matrices shared by all heads
    row: int | None = None  # None = every row
    col: int | None = None  # None = every column


@fixed(eq=True)
class Segment:
    """A run of operations that fill one matrix, row-major."""

    stage: str
    number: int  # 1-based stage number as shown (3/6 Score)
    head: int | None
    target: str
    rows: int
    cols: int
    per_row: bool  # one operation fills a whole row (Embed, Concat)
    start: int  # index of its first operation
    about: Stage | None = None  # the registered stage it belongs to (its spec's Stage), set by the trace

    @property
    def count(self) -> int:
        return self.rows if self.per_row else self.rows * self.cols

    @property
    def stop(self) -> int:
        return self.start + self.count


@fixed(eq=True)
class Plan:
    """A segment as a stage asks for it; the trace numbers it and places it after the ones before."""

    target: str
    rows: int
    cols: int
    per_row: bool = False


@fixed(eq=True)
class StageRun:
    """One stage of one head (or a shared stage): operations start..stop-1."""

    stage: str
    number: int
    head: int | None
    start: int
    stop: int


@fixed(eq=True)
class Operation:
    """One step: one cell (or one row) of one matrix, with its arithmetic."""

    index: int
    segment: Segment
    row: int
    col: int | None  # None when the operation fills a whole row
    value: float | None  # the cell's value (None for row operations)
    operands: tuple[Ref, ...]
    arithmetic: str  # e.g. "Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2"
    details: tuple[str, ...] = ()

    @property
    def stage(self) -> Stage:
        assert self.segment.about is not None, "a segment the trace did not place"
        return self.segment.about

    @property
    def head(self) -> int | None:
        return self.segment.head

    @property
    def target(self) -> Ref:
        return Ref(self.segment.target, self.segment.head, self.row, self.col)


# Where each part of softmax(QKᵀ/√dₖ)V sits in the formula line; stages place their parts in these slots
INPUT, OPEN, Q_SLOT, QK_DOT, K_SLOT, DIVIDE, BIAS, CLOSE, V_DOT, V_SLOT, GATE_SLOT, CONCAT, W_O_SLOT = range(13)


@fixed(eq=True)
class FormulaPart:
    """A piece of the formula line, shown in its slot."""

    slot: int
    text: str
    alone: bool = False  # the other parts of its slot are left out (Embed's "X → " stands in for "X̂ → ")


@fixed(eq=True)
class PaneStyle:
    """How a matrix's pane is drawn beyond its numbers."""

    row_max: bool = False  # each row's largest cell marked (the scores before the softmax)
    heat: bool = False  # shaded by value (the weights)
    masked: bool = False  # the mask's forced zeros marked, where the scenario has a mask


Key = tuple[str, int | None]  # a pane: a matrix's name and its head
NO_NAMES: Mapping[str, str] = MappingProxyType({})
NO_STYLES: Mapping[str, PaneStyle] = MappingProxyType({})
if TYPE_CHECKING:  # the cost view's module loads when it is first used, not with every stage
    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.core.cost import Count, Phase
CostFace = Callable[[Scenario, "Phase"], "Count"]  # a stage's operations and bytes in one phase (core/cost.py)


class StageSpec:
    """One stage, everything the trace and the screen need about it. A module subclasses this once."""

    stage: Stage
    per_head: bool = False  # run once per head, head after head, with the per-head stages next to it
    matrices: tuple[str, ...] = ()  # the matrices :meth:`matrix` answers for (those it writes, inputs it shows)
    transposed: Mapping[str, str] = NO_NAMES  # panes showing one of them transposed -> the matrix they show
    key_columns: tuple[str, ...] = ()  # those of its matrices with a column per key (labelled by the key tokens)
    styles: Mapping[str, PaneStyle] = NO_STYLES
    # the cost view (core/cost.py): set by :func:`counts` beside the module's SPEC; None lists the stage as not
    # counted, with this reason, never as a silent 0
    cost: CostFace | None = None
    uncounted: str = "its operations and bytes are not counted yet"
    # its cells are given, read as another layer computed them (the reused K and V), not worked out here: the
    # quiz asks none of them, as it asks none of Embed's X (teach/quiz.py)
    cells_given: bool = False

    # --- the trace ----------------------------------------------------------------------------

    def runs(self, trace: TraceContext) -> bool:
        """Whether the scenario has this stage."""
        return True

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        """The matrices it fills, in order (``head`` is None for a shared stage)."""
        raise NotImplementedError

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        """One operation of one of its segments, with its arithmetic at ``d`` decimals."""
        raise NotImplementedError

    def named(self, trace: TraceContext) -> Stage:
        """The stage as this scenario names it."""
        return self.stage

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        """What the stage means, in words that fit this scenario."""
        return self.stage.meaning

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        """The full values of one of :attr:`matrices`; KeyError where this scenario has none."""
        raise KeyError(name)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        """What one of its matrices multiplies and adds: written as whole numbers when they all are (an input
        says ``[]``); None, the default: always with decimals."""
        return None

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        """A row of one of its matrices as the panes label it, where not by the query tokens (the keys', say);
        None, the default: the trace's own rule."""
        return None

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        """A column of one of its matrices as the panes label it, where not by its index; None, the default: the
        trace's own rule."""
        return None

    # --- the screen ---------------------------------------------------------------------------

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        """The matrices one of its operations reads and writes, left to right."""
        return [(op.segment.target, op.segment.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        """Its matrices among every matrix of the viewed head, for screens with room for context."""
        return []

    def overview_tail(self, trace: TraceContext, head: int) -> list[Key]:
        """Context panes that come after every stage's overview (they only take room nothing above needs)."""
        return []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        """A pane's title without its shape, for one of :attr:`matrices` or :attr:`transposed`."""
        return name

    def filled(self, trace: TraceContext, name: str, head: int | None, index: int) -> int:
        """How many cells of one of its matrices are shown once operation ``index`` is done."""
        return trace.filled(name, head, index)

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        """Its parts of the formula line while operation ``op`` (of any stage) is shown."""
        return []

    def lights(self, seg: Segment) -> frozenset[int]:
        """The formula slots one of its segments computes."""
        return frozenset()

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        """The input an edit opens on at one of its operations, where that is the stage's own input (the gate's
        weights, the cap); None, the default: the first X or weight the operation reads (ui/live.py)."""
        return None

    # --- the quiz -----------------------------------------------------------------------------

    def withheld(self, trace: TraceContext, op: Operation, decimals: int) -> str | None:
        """The arithmetic shown while the result is asked for; None: the arithmetic with its result hidden."""
        return None

    def choice(self, trace: TraceContext, op: Operation) -> tuple[str, tuple[str, ...], frozenset[str]] | None:
        """A "which one?" question asked before the value: (prompt, choices, the right ones)."""
        return None

    # --- the Markdown export ------------------------------------------------------------------

    def markdown_before(self, page: MarkdownPage) -> list[str]:
        """Lines before the first head's sections, for a per-head stage (the wide matrices the heads cut)."""
        return []

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """Its section under its heading: the matrices it fills, then its worked lines."""
        out: list[str] = []
        for plan in self.segments(page.trace, head):
            out += [page.table(plan.target, head), ""]
        return out + page.worked(self.stage.key, head)

    def markdown_details(self, op: Operation) -> tuple[str, ...]:
        """The details the page prints under one of its worked lines."""
        return op.details

    # --- the worksheet ------------------------------------------------------------------------

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        """Its tables on the worksheet (inputs among them, marked ``given``), each worked from the tables
        printed before it under the printed-page policy."""
        return []

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        """The answer key's line for a blank in one of its tables, from the printed operands."""
        raise KeyError(table.name)

    def worksheet_note(self, comp: Computation, owners: list[int], head: int) -> list[str]:
        """Lines opening its worksheet section for a head."""
        return []

    def worksheet_rules(self, comp: Computation) -> list[str]:
        """Its bullets among the page's rules (how to work its tables), where the scenario has the stage."""
        return []


def counts(spec: StageSpec) -> Callable[[CostFace], CostFace]:
    """``@counts(SPEC)`` over a stage module's cost function: the stage's face in the cost view."""

    def attach(face: CostFace) -> CostFace:
        spec.cost = face
        return face

    return attach


# --- helpers several stages use -------------------------------------------------------------------


def paren(text: str) -> str:
    """A subtrahend in parentheses when negative: ``0.5 − (-1.000)``."""
    return f"({text})" if text.startswith("-") else text


def hround(x: float, decimals: int) -> float:
    """Rounded as the hand computation rounds: as the number's text reads."""
    return float(round_to(np.array(x), decimals))


def x_in(trace: TraceContext) -> tuple[str, str]:
    """What the projections read: (its matrix, its name on screen), X or the normalised X̂."""
    return ("X", "X") if trace.comp.norm is None else ("X_norm", "X̂")


def kv_shared(trace: TraceContext, hr: HeadResult | None) -> str:
    """`` (K/V head 1: heads 1,2)`` in a K or V title where query heads share K/V heads."""
    sc = trace.comp.scenario
    if hr is None or sc.num_kv_heads is None:
        return ""
    readers = [str(g + 1) for g, other in enumerate(trace.comp.heads) if other.kv_head == hr.kv_head]
    return f" (K/V head {hr.kv_head + 1}: heads {','.join(readers)})"


def dot_bias_line(a: Numbers, b: Numbers, bias: float, a_int: bool, b_int: bool, result: str,
                  decimals: int, hand: int | None) -> str:
    """``1·1 + 0·0 + 0.5 = 1.5``: the dot product, then the bias, with guard digits as needed."""
    bias_int = bias == round(bias)
    text = ""
    for p in _places(decimals, a_int, b_int, bias_int):
        sides, total, steps = dot_at(a, b, a_int, b_int, p, hand)
        bt = operand(bias, bias_int, p)
        sides = [f"{s} + {bt}" for s in sides]
        text = " = ".join([*sides, result])
        # by hand the last side is a plain sum of numbers as written: at the result's decimals it must give
        # the result exactly (a shown -1.4 standing for a bias of -1.45 would be off by the hidden 0.05)
        if steps and agrees(total + shown(bt), result, exact=hand is not None and p <= decimals):
            break
    return text

