"""What the screen shows at a position, as plain data (no Textual, no Rich).

The app's widgets only draw what these functions return, so every pane is a pure
function of (computation, position) and can be tested without a terminal.
"""

from __future__ import annotations

import itertools
from dataclasses import field
from functools import cached_property

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import BIG, cell_len, fmt, is_integral
from qkv_tui.core.scenario import BoolMatrix, Matrix, Scenario
from qkv_tui.teach.handcalc import round_to
from qkv_tui.teach.stages.common import PaneStyle
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import WIDE, Operation, Ref, Trace

PLAIN = PaneStyle()  # a pane no stage styles
STAGE_KEYS = "1234567890"  # the keys that jump to stages 1 … 10: the digits in keyboard order, 0 last


def stage_key(number: int) -> str | None:
    """The key that jumps to stage ``number`` (1-based): 1 … 9, then 0 for the tenth; later stages have none."""
    return STAGE_KEYS[number - 1] if 1 <= number <= len(STAGE_KEYS) else None


@fixed
class PaneSpec:
    """One matrix pane: its values, labels, progress and highlights."""

    key: str  # stable identity, e.g. "Q" or "output@1"
    title: str  # "Q = X·W_Q  3×3"
    subtitle: str  # the head's name where the matrix belongs to a head
    values: Matrix  # as displayed (Kᵀ already transposed)
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    integral: bool
    col_widths: tuple[int, ...]  # characters of each column's widest cell or label
    filled: int  # cells of the source matrix computed so far, row-major
    transposed: bool = False  # values is the source matrix transposed (Kᵀ)
    current: tuple[int, int | None] | None = None  # (row, col); col None = the whole row
    rows: frozenset[int] = frozenset()  # operand rows
    cols: frozenset[int] = frozenset()  # operand columns
    cells: frozenset[tuple[int, int]] = frozenset()
    mark_row_max: bool = False
    heat: bool = False
    decimals: int = 3
    allow: BoolMatrix | None = None  # for weights: False where the mask forced a 0
    hide_current: bool = False  # the learner is predicting the current cell: show "?"
    changed: frozenset[tuple[int, int]] = frozenset()  # cells an edit just changed (as displayed), marked until the next step

    def is_filled(self, row: int, col: int) -> bool:
        if self.transposed:
            row, col = col, row
            width = self.values.shape[0]
        else:
            width = self.values.shape[1]
        return bool(row * width + col < self.filled)

    def row_complete(self, row: int) -> bool:
        return self.is_filled(row, self.values.shape[1] - 1) and self.is_filled(row, 0)

    @property
    def source(self) -> Matrix:
        """The array the values come from (Kᵀ is a fresh view of K each time): same source, same numbers."""
        return self.values if self.values.base is None else self.values.base

    @cached_property
    def focus_point(self) -> tuple[int | None, int | None]:
        """(row, col) to keep in view: the current cell, or else the first cells being read."""
        if self.current is not None:
            return self.current
        if self.cells:
            return min(self.cells)
        return (min(self.rows) if self.rows else None, min(self.cols) if self.cols else None)

    @cached_property
    def label_width(self) -> int:
        return max((cell_len(label) for label in self.row_labels), default=0)

    @cached_property
    def offsets(self) -> tuple[int, ...]:
        """Where each column starts after the row labels (each cell has a space before it); one more for the end."""
        return tuple(itertools.accumulate((w + 1 for w in self.col_widths), initial=0))

    @property
    def content_width(self) -> int:
        """Columns needed to show every cell without scrolling (labels included, border not)."""
        return self.label_width + self.offsets[-1] - self.lead_cut

    @property
    def lead_cut(self) -> int:
        """1 where the pane has no row labels (layout.fitted): no blank is needed before its first column."""
        return 0 if self.label_width else 1


def changed_rows(old: PaneSpec, new: PaneSpec) -> set[int] | None:
    """Rows drawn differently in two states of one pane, so only they are redrawn; None means all."""
    same = ("key", "transposed", "col_widths", "decimals", "title", "subtitle", "row_labels", "hide_current")
    if old.source is not new.source or any(getattr(old, a) != getattr(new, a) for a in same):
        return None
    if old.cols != new.cols or (new.transposed and old.filled != new.filled):
        # a highlighted column moved, or Kᵀ filled a column: a cell in every row changes
        return set(range(int(new.values.shape[0])))
    rows: set[int] = set()
    if old.filled != new.filled:
        width = int(new.values.shape[1])
        last_row = int(new.values.shape[0]) - 1
        lo, hi = sorted((old.filled, new.filled))
        rows.update(range(lo // width, min((hi - 1) // width, last_row) + 1))
    for current in (old.current, new.current):
        if current is not None and old.current != new.current:
            rows.add(current[0])
    rows.update(old.rows ^ new.rows)
    rows.update(r for r, _ in old.cells ^ new.cells)
    rows.update(r for r, _ in old.changed ^ new.changed)
    return rows


@fixed(eq=True)
class Explanation:
    """The explanation panel's content for one operation."""

    stage_label: str  # "3/6 Score"
    counter: str  # "op 31/66"
    head_label: str  # "head 1 (1/2)" or ""
    arithmetic: str
    details: tuple[str, ...]
    meaning: str
    formula: tuple[tuple[str, bool], ...]  # pieces of softmax(QKᵀ/√dₖ)V, True = being computed
    # (label, "done" | "current" | "todo"); a label starts with the stage's key where it has one ("0 W_O")
    stages: tuple[tuple[str, str], ...] = field(default=())
    layer: str = ""  # "layer 2" where the scenario is a layer of a model ([ ] and enter in the heads view change it)


def model_layer(sc: Scenario) -> int | None:
    """The model layer (0-based, as a file's ``layer =``) the scenario shows, or None for hand-made numbers."""
    return sc.input.chosen_layer if sc.input.schedule or sc.input.layer is not None else None


def column_widths(values: Matrix, integral: bool, decimals: int, labels: tuple[str, ...]) -> tuple[int, ...]:
    """Characters each column needs for its widest cell or its label.

    Cell widths come from the magnitudes, without formatting every cell.
    """
    finite = np.isfinite(values)
    size = np.where(finite, np.abs(values), 0.0)
    if not integral:
        size = round_to(size, decimals)  # 999.9996 prints as 1000.000; 1e306 must not overflow to inf
    big = (size >= BIG) & (not integral)  # written d.ddde+NN
    fixed = np.where(big, 0.0, size).max(axis=0)  # (cols,) the widest number written in full
    whole = np.floor(np.log10(np.maximum(fixed, 1.0))).astype(int) + 1
    digits = whole if integral else whole + 1 + decimals
    exponent = np.where(size.max(axis=0) >= 1e100, 3, 2)
    digits = np.where(big.any(axis=0), np.maximum(digits, 4 + decimals + exponent), digits)
    negative = ((values < 0) & finite).any(axis=0)
    width = digits + negative
    width = np.maximum(width, np.where((~finite).any(axis=0), 2, 1))  # "−∞"
    return tuple(max(int(w), cell_len(label)) for w, label in zip(width, labels))


def matrix_pane(key: str, title: str, values: Matrix, rows: tuple[str, ...], cols: tuple[str, ...], decimals: int, *,
                subtitle: str = "", filled: int | None = None, current: tuple[int, int | None] | None = None,
                block: frozenset[int] = frozenset(), heat: bool = False, row_max: bool = False, worked: bool = False,
                allow: BoolMatrix | None = None, changed: frozenset[tuple[int, int]] = frozenset()) -> PaneSpec:
    """A side view's pane of one matrix, its size in the title, every cell filled unless ``filled`` says fewer.
    ``worked``: numbers the lines work out (m, ℓ, Õ), shown with decimals even where they start at 0."""
    # its own array: a pane knows a new state by its source, and two blocks' (or steps') slices of one buffer share theirs
    values = np.array(np.atleast_2d(values))
    integral = not heat and not worked and is_integral(values)
    return PaneSpec(
        key=key, title=f"{title}  {values.shape[0]}×{values.shape[1]}", subtitle=subtitle, values=values,
        row_labels=rows, col_labels=cols, integral=integral,
        col_widths=column_widths(values, integral, decimals, cols),
        filled=values.size if filled is None else filled, current=current, rows=block, heat=heat,
        mark_row_max=row_max, decimals=decimals, allow=allow, changed=changed,
    )


class View:
    """Pane and explanation builders over one trace, with per-matrix caches."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.comp = trace.comp
        self._widths: dict[tuple[str, int | None, int], tuple[int, ...]] = {}
        self._labels: dict[tuple[str, int | None], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    # --- panes -----------------------------------------------------------------

    def focus_keys(self, op: Operation) -> list[tuple[str, int | None]]:
        """The matrices the current operation reads and writes, left to right."""
        return self.trace.spec(op.segment.stage).panes(self.trace, op)

    def overview_keys(self, pos: Position) -> list[tuple[str, int | None]]:
        """Every matrix of the viewed head and after, for screens with room for context."""
        specs = self.trace.specs
        keys = [key for spec in specs for key in spec.overview(self.trace, pos.head)]
        # last, so they only take room nothing above needs (the other heads' outputs that Concat joins)
        return keys + [key for spec in specs for key in spec.overview_tail(self.trace, pos.head)]

    def pane(self, name: str, head: int | None, pos: Position, op: Operation, decimals: int,
             hide_current: bool = False) -> PaneSpec:
        trace = self.trace
        transposed = name in trace.transposed
        source = trace.transposed.get(name, name)
        owner = trace.owner(source)
        style = owner.styles.get(name, PLAIN)
        values = trace.matrix(source, head)
        integral = trace.integral(source, head)
        row_labels, col_labels = self.labels(source, head)
        if transposed:
            values = values.T
            row_labels, col_labels = col_labels, row_labels
        wkey = (name, head, decimals)
        if wkey not in self._widths:
            self._widths[wkey] = column_widths(values, integral, decimals, col_labels)
        rows: set[int] = set()
        cols: set[int] = set()
        cells: set[tuple[int, int]] = set()
        for ref in op.operands:
            if source in WIDE and head is not None and ref.matrix == source.removesuffix("_wide") and ref.head == head:
                offset = trace.wide_offset(ref.matrix, head)
                ref = Ref(source, head, ref.row, None if ref.col is None else ref.col + offset)
            if ref.matrix == source and ref.head == head:
                _mark(ref, transposed, rows, cols, cells)
        current = None
        target = op.target
        if target.matrix == source and target.head == head:
            current = (target.row, target.col) if target.row is not None else None
        subtitle = self.comp.heads[head].name if head is not None and len(self.comp.heads) > 1 else ""
        if source in WIDE and head is not None:
            subtitle = f"{subtitle} = h{head + 1}:*"
        return PaneSpec(
            key=f"{name}@{head}", title=self.title(name, head, values), subtitle=subtitle,
            values=values, row_labels=row_labels, col_labels=col_labels, integral=integral,
            col_widths=self._widths[wkey], filled=owner.filled(trace, source, head, pos.index), transposed=transposed,
            current=current, rows=frozenset(rows), cols=frozenset(cols), cells=frozenset(cells),
            mark_row_max=style.row_max, heat=style.heat, decimals=decimals,
            allow=self.comp.allow if style.masked and self.comp.scenario.mask_kind != "none" else None,
            hide_current=hide_current and current is not None,
        )

    def labels(self, source: str, head: int | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Row and column labels of a matrix, built once: 512-token panes are drawn at every step."""
        key = (source, head)
        if key not in self._labels:
            n_rows, n_cols = self.trace.matrix(source, head).shape
            self._labels[key] = (tuple(self.trace.row_label(source, r) for r in range(n_rows)),
                                 tuple(self.trace.col_label(source, c) for c in range(n_cols)))
        return self._labels[key]

    def title(self, name: str, head: int | None, values: Matrix) -> str:
        own = self.trace.owner(name).title(self.trace, name, head)
        return f"{own}  {values.shape[0]}×{values.shape[1]}"

    def panes(self, pos: Position, decimals: int = 3, overview: bool = False,
              hide_current: bool = False) -> tuple[list[PaneSpec], list[PaneSpec]]:
        """(focus panes, overview panes) at a position; ``hide_current`` shows the current cell as "?"."""
        op = self.trace.op(pos.index, decimals)
        focus = self.focus_keys(op)
        shown = [self.pane(name, head, pos, op, decimals, hide_current) for name, head in focus]
        extra: list[PaneSpec] = []
        if overview:
            taken = {(self.trace.transposed.get(n, n), h) for n, h in focus}
            extra = [self.pane(n, h, pos, op, decimals) for n, h in self.overview_keys(pos) if (n, h) not in taken]
        return shown, extra

    # --- explanation ----------------------------------------------------------

    def explain(self, pos: Position, decimals: int = 3) -> Explanation:
        trace = self.trace
        op = trace.op(pos.index, decimals)
        seg = op.segment
        heads = self.comp.heads
        head_label = ""
        if len(heads) > 1 and self.shows_head(pos):
            head_label = f"{heads[pos.head].name} ({pos.head + 1}/{len(heads)})"
        meaning = trace.meaning(seg.stage, seg.head)
        stages = []
        for number, key in enumerate(trace.stage_keys, start=1):
            state = "current" if number == seg.number else ("done" if number < seg.number else "todo")
            jump = stage_key(number)  # the bar names each stage by the key that jumps there, so 0 for the tenth
            stages.append((f"{jump} {trace.stage(key).name}" if jump else trace.stage(key).name, state))
        return Explanation(
            stage_label=f"{seg.number}/{trace.stage_count} {trace.stage(seg.stage).name}",
            counter=f"op {pos.index + 1}/{len(trace)}",
            head_label=head_label,
            arithmetic=op.arithmetic,
            details=op.details,
            meaning=meaning,
            formula=self.formula(op),
            stages=tuple(stages),
        )

    def shows_head(self, pos: Position) -> bool:
        """Whether the screen at ``pos`` shows the viewed head's numbers, so tab changes it and the header names the
        head: a head's own stage, and one that belongs to no one head (Embed, Concat, W_O) whose context panes
        are the viewed head's matrices."""
        op = self.trace.op(pos.index, 3)
        if op.segment.head is not None:
            return True
        return any(head == pos.head for _, head in (*self.focus_keys(op), *self.overview_keys(pos)))

    def formula(self, op: Operation) -> tuple[tuple[str, bool], ...]:
        """The pieces of softmax(QKᵀ/√dₖ)V each stage of the scenario places, lit where ``op``'s stage computes."""
        trace = self.trace
        lit = trace.spec(op.segment.stage).lights(op.segment)
        parts = sorted((p for spec in trace.specs for p in spec.formula(trace, op)), key=lambda p: p.slot)
        alone = {p.slot for p in parts if p.alone}  # "X → " at Embed stands in for "X̂ → "
        return tuple((p.text, p.slot in lit) for p in parts if p.alone or p.slot not in alone)


def _mark(ref: Ref, transposed: bool, rows: set[int], cols: set[int], cells: set[tuple[int, int]]) -> None:
    row, col = (ref.col, ref.row) if transposed else (ref.row, ref.col)
    if row is not None and col is not None:
        cells.add((row, col))
    elif row is not None:
        rows.add(row)
    elif col is not None:
        cols.add(col)



def hand_note(exact: Trace, hand: Trace, index: int, decimals: int) -> str:
    """Says whether hand rounding has drifted from the exact value of this operation."""
    op_hand, op_exact = hand.op(index, decimals), exact.op(index, decimals)
    if op_hand.value is None or op_exact.value is None:
        return f"hand rounding: every intermediate rounded to {_places(decimals)} before it is used"
    target = op_hand.arithmetic.split(" = ")[0]
    integral = exact.integral(op_exact.segment.target, op_exact.head)
    by_hand, exactly = fmt(op_hand.value, integral, decimals), fmt(op_exact.value, integral, decimals)
    if by_hand == exactly:
        return f"hand rounding: {target} = {by_hand}, the same as the exact value at {_places(decimals)}"
    return (f"hand rounding: {target} = {by_hand} by hand, but {exactly} exactly"
            f" ({op_exact.value:.{decimals + 3}f}): rounded intermediates have drifted")


def _places(decimals: int) -> str:
    return "1 decimal" if decimals == 1 else f"{decimals} decimals"


WHATIF_WIDTH = 78  # the what-if table fits an 80-column terminal, explanation padding included


def whatif_lines(comp_head: HeadResult, allow: BoolMatrix, row: int, token: str, keys: tuple[str, ...],
                 decimals: int) -> list[str]:
    """The query row's softmax with and without the √dₖ division, at dₖ ×1, ×4 and ×16, as a table.

    Each weight sits under its key's label; a row of more than six keys shows only its
    largest weight and which key has it.
    """
    from qkv_tui.teach.whatif import what_if

    rows = what_if(comp_head, allow, row)
    divisor = "÷√dₖ" if comp_head.scale_is_default else f"÷{comp_head.scale:g}·√f"
    every = len(keys) <= 6
    number = 2 + decimals  # "0.707": a weight is never more than 1
    if every:
        labels = [key if cell_len(key) <= 8 else key[:7] + "…" for key in keys]
        widths = [max(number, cell_len(label)) for label in labels]
        header = " ".join(_pad(label, w) for label, w in zip(labels, widths)) + " " + _pad("max", number)
    else:
        header = _pad("max", number) + " key"

    def weights(values: Matrix) -> str:
        top = fmt(float(values.max()), False, decimals)
        if not every:
            return f"{top} {keys[int(np.argmax(values))]}"
        return " ".join(_pad(fmt(float(v), False, decimals), w) for v, w in zip(values, widths)) + f" {top:>{number}}"

    if every and 2 * cell_len(header) + 13 > WHATIF_WIDTH:  # long labels: keep the table inside 80 columns
        every = False
        header = _pad("max", number) + " key"
    lines = [f"what if, row {token}: softmax with {divisor} | without scaling, for heads f× wider",
             f"  dₖ   ×f  {header} | {header}"]
    for r in rows:
        lines.append(f"  {r.d_k:<4} ×{r.factor:<2} {weights(r.scaled)} | {weights(r.unscaled)}")
    lines.append("  f× wider heads stretch scores by √f: scaled weights stay put, unscaled saturate")
    # the table isolates the division: a part that steps the scores (the soft-cap) says it is left out
    return lines + ask.said(comp_head, "whatif.left_out", name=comp_head.name)


def _pad(text: str, width: int) -> str:
    """Right-aligned in ``width`` terminal cells, as numbers are."""
    return " " * max(width - cell_len(text), 0) + text
