"""The stages of [differential] (contracts §14): each map's Score, Scale and Softmax, λ, Subtract, Mix, the
sub-norm and the (1 − λ_init) factor, every cell's arithmetic read from the head's DiffForward record.

The one-map stages (Score … Mix) step aside for a head whose part has stages of its own (teach/stages/replaced.py
asks the record); these take their place, map 1 beside map 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import NEG_INF, fmt, operand
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants.differential import TABLE
from qkv_tui.kernels.differential import DiffForward, DiffMap
from qkv_tui.teach.arith import agrees, dot_line, first_fit, quotient_line, shown, softmax_row, tries
from qkv_tui.teach.stages import differential_sheet
from qkv_tui.teach.stages.common import (
    CLOSE,
    DIVIDE,
    GATE_SLOT,
    K_SLOT,
    OPEN,
    Q_SLOT,
    QK_DOT,
    V_DOT,
    V_SLOT,
    FormulaPart,
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    paren,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.norm import RowStats, cell_lines
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table

if TYPE_CHECKING:
    from qkv_tui.core.cell_edit import InputCell
    from qkv_tui.teach.stages.markdown import MarkdownPage

SUB = {1: "₁", 2: "₂"}


def diff_of(trace: TraceContext, head: int | None) -> DiffForward:
    assert head is not None
    return trace.comp.heads[head].need(DiffForward)


def has_diff(trace: TraceContext) -> bool:
    return any(h.part(DiffForward) is not None for h in trace.comp.heads)


def over(heads: Sequence[HeadResult]) -> str:
    """How a line writes what these heads' maps were divided by: √d (the half width), or the number every one
    of them divides by where the file sets ``scale`` (teach/stages/scale.py's divisor_text, for one map)."""
    if all(hr.scale_is_default for hr in heads):
        return "√d"
    return ask.set_divisor(heads) or "scale"


def over_of(trace: TraceContext, head: int | None) -> str:
    return over(trace.comp.heads if head is None else [trace.comp.heads[head]])


# each matrix's name in the worked lines, pane titles and worksheet: what the page's tables write in their corner
CORNERS = {"scores_1": "scores₁", "scores_2": "scores₂", "scaled_1": "scaled₁", "scaled_2": "scaled₂",
           "weights_1": "p₁", "weights_2": "p₂", "lambda": "λ"}


class _DiffStage(StageSpec):
    """The formula line reads (softmax(Q₁·K₁ᵀ/√d) − λ·softmax(Q₂·K₂ᵀ/√d))·V → RMSNorm·(1 − λ_init): each stage
    places its pieces (``parts``) and lights its slots; map 2, λ and Subtract share the slot after map 1's ")"."""

    per_head = True
    parts: tuple[tuple[int, str], ...] = ()
    lit: frozenset[int] = frozenset()

    def runs(self, trace: TraceContext) -> bool:
        return has_diff(trace)

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(slot, text) for slot, text in self.parts]

    def lights(self, seg: Segment) -> frozenset[int]:
        return self.lit

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """Its tables named as its lines name them (p₁, not weights_1), then its worked lines."""
        out: list[str] = []
        for plan in self.segments(page.trace, head):
            out += [page.table(plan.target, head, CORNERS.get(plan.target, plan.target)), ""]
        return out + page.worked(self.stage.key, head)

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        return differential_sheet.tables(self.stage.key, chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return differential_sheet.line(self.stage.key, cells, table, row, col, answer)


class _MapStage(_DiffStage):
    """A stage of one of the two maps (``half`` 1 or 2): its one matrix is a query-by-key grid of that map."""

    half: int

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan(self.matrices[0], sc.n, sc.m)]

    def map_of(self, trace: TraceContext, head: int | None) -> DiffMap:
        f = diff_of(trace, head)
        return f.map_1 if self.half == 1 else f.map_2


def _both_halves(trace: TraceContext, head: int | None, name: str) -> list[Plan]:
    """One matrix a row per token and 2d columns, V's width: both maps' halves of V side by side."""
    return [Plan(name, trace.comp.scenario.n, 2 * diff_of(trace, head).d)]


class MapScore(_MapStage):
    """scores_a = Q_a·K_aᵀ for map a (1 or 2): the halves of the head's 2d-wide Q and K."""

    def __init__(self, half: int) -> None:
        self.half, s = half, SUB[half]
        self.stage = Stage(f"diff_score_{half}", f"Score{s}",
                           f"Map {half} scores its own half: Q{s} is column{'s 0…d−1' if half == 1 else 's d…2d−1'}"
                           f" of Q, K{s} the same columns of K, and scores{s}[i,j] = Q{s}[i]·K{s}[j]."
                           + (" The second map is scored exactly like the first, with the other half of the"
                              " projections." if half == 2 else ""))
        self.matrices = (f"scores_{half}",)
        self.key_columns = self.matrices
        self.styles = MappingProxyType({f"scores_{half}": PaneStyle(row_max=True)})
        # map 1 opens the bracket the Subtract closes; map 2's pieces are one with λ's and Subtract's
        self.parts = ((OPEN, "("), (Q_SLOT, "Q₁"), (QK_DOT, "·"), (K_SLOT, "K₁ᵀ")) if half == 1 else ()
        self.lit = frozenset({Q_SLOT, QK_DOT, K_SLOT}) if half == 1 else frozenset({CLOSE})

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h, a, s = seg.head, self.half, SUB[self.half]
        assert h is not None and col is not None
        f = diff_of(trace, h)
        Q, K = f.used(a)
        value = float(self.map_of(trace, h).scores[row, col])
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        whole = trace.integral("Q", h) and trace.integral("K", h) and not f.moved  # scored as projected
        result = fmt(value, whole, d)
        work = dot_line(Q[row], K[col], whole, whole, result, d, trace.hand)
        text = f"scores{s}[{q},{k}] = Q{s}[{q}]·K{s}[{k}] = {work}"
        return Operation(index, seg, row, col, value, (Ref("Q", h, row), Ref("K", h, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return self.map_of(trace, head).scores

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return None if diff_of(trace, head).moved else [("Q", head), ("K", head)]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("Q", op.head), ("KT", op.head), (f"scores_{self.half}", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(f"scores_{self.half}", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        s = SUB[self.half]
        return f"scores{s} = Q{s}·K{s}ᵀ"


class MapScale(_MapStage):
    """scaled_a = scores_a / √d (d the half width), then the mask: −∞ where a key is hidden."""

    def __init__(self, half: int) -> None:
        self.half, s = half, SUB[half]
        self.stage = Stage(f"diff_scale_{half}", f"Scale{s}",
                           f"Divide map {half}'s scores by √d, d the half width each map scores with (not √(2d),"
                           " the head's whole W_Q width), then mask: a hidden key becomes −∞, in both maps alike.")
        self.matrices = (f"scaled_{half}",)
        self.key_columns = self.matrices
        self.parts = ((DIVIDE, "/√d"),) if half == 1 else ()
        self.lit = frozenset({DIVIDE}) if half == 1 else frozenset({CLOSE})

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        by = over_of(trace, head)
        if by == "√d":
            return self.stage.meaning
        return (f"Divide map {self.half}'s scores by {by}, the scale the scenario sets (in place of √d, d the half"
                " width each map scores with), then mask: a hidden key becomes −∞, in both maps alike.")

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(DIVIDE, f"/{over_of(trace, op.head)}")] if self.half == 1 else []

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h, a, s = seg.head, self.half, SUB[self.half]
        assert h is not None and col is not None
        f, m = diff_of(trace, h), self.map_of(trace, h)
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        default = trace.comp.heads[h].scale_is_default and trace.hand is None
        symbol = f"√{f.d}" if default else None
        work = quotient_line(float(m.scores[row, col]), trace.integral(f"scores_{a}", h), f.divisor, symbol,
                             f.divisor == round(f.divisor), fmt(float(m.scaled[row, col]), False, d), d)
        text = f"scaled{s}[{q},{k}] = {work}"
        value = float(m.masked[row, col])
        details: tuple[str, ...] = ((f"d = {f.d} (each map's half of dₖ = {2 * f.d})",) if over_of(trace, h) == "√d"
                                    else (f"scale = {f.divisor:g}, set by the scenario in place of √d = √{f.d}",))
        if not trace.comp.allow[row, col]:
            text += f", masked → {NEG_INF}"
            details = (f"{q} may not see {k}: the mask hides it in both maps",)
        return Operation(index, seg, row, col, value, (Ref(f"scores_{a}", h, row, col),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return self.map_of(trace, head).masked

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [(f"scores_{self.half}", op.head), (f"scaled_{self.half}", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(f"scaled_{self.half}", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        s = SUB[self.half]
        return f"scaled{s} = scores{s} / {over_of(trace, head)}, masked"


class MapSoftmax(_MapStage):
    """p_a = softmax(scaled_a), each row a distribution summing to 1."""

    def __init__(self, half: int) -> None:
        self.half, s = half, SUB[half]
        self.stage = Stage(f"diff_softmax_{half}", f"Softmax{s}",
                           f"Map {half}'s softmax, row by row: subtract the row max, exponentiate, divide by the"
                           f" row sum. Each row of p{s} is a distribution (never negative, adding to 1);"
                           " the difference of the two maps, next, is not.")
        self.matrices = (f"weights_{half}",)
        self.key_columns = self.matrices
        self.parts = ((OPEN, "softmax("), (CLOSE, ")")) if half == 1 else ()
        self.lit = frozenset({OPEN, CLOSE}) if half == 1 else frozenset({CLOSE})
        self.styles = MappingProxyType({f"weights_{half}": PaneStyle(heat=True, masked=True)})

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h, a, s = seg.head, self.half, SUB[self.half]
        assert h is not None and col is not None
        m = self.map_of(trace, h)
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        r = softmax_row(m.masked[row], m.weights[row], d)
        if r.scaled[col] == NEG_INF:
            text = f"p{s}[{q},{k}] = e^{NEG_INF} / {r.total} = 0 (masked)"
        else:
            text = (f"p{s}[{q},{k}] = e^({r.scaled[col]} − {paren(r.top)}) / {r.total} = e^{r.shifted[col]} / {r.total}"
                    f" = {r.exps[col]} / {r.total} = {r.weights[col]}")
        keep = [j for j, t in enumerate(r.scaled) if t != NEG_INF]
        exps = " | ".join(f"e^{r.shifted[j]} = {r.exps[j]}" for j in keep)
        details = (f"row max = max({', '.join(r.scaled[j] for j in keep)}) = {r.top}",
                   f"e^(s − max): {exps}  →  Σ = {r.total}")
        value = float(m.weights[row, col])
        return Operation(index, seg, row, col, value, (Ref(f"scaled_{a}", h, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return self.map_of(trace, head).weights

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [(f"scaled_{self.half}", op.head), (f"weights_{self.half}", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [(f"weights_{self.half}", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        s = SUB[self.half]
        return f"p{s} = softmax(scaled{s})"


LAMBDA_COLS = differential_sheet.LAMBDA_COLS  # the λ line's terms, as the worksheet names its columns
# the same terms in a pane, shorter (exp₁ = e^(λ_q1·λ_k1); the λ line names them whole): the page's names
# made the pane of a backward stage too wide for 80 columns beside the panes it is read with
PANE_COLS = ("q1·k1", "exp₁", "q2·k2", "exp₂", "λ")
HEAD_ROW = "head"  # the row label of a table with one row per head (λ and its gradients): the head in view


class Lambda(_DiffStage):
    """λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init: each dot product and exponential a cell of its own."""

    stage = Stage("diff_lambda", "λ",
                  "How much of the second map to subtract: λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init. The four"
                  " λ vectors are learned (the paper's reparameterisation, so λ can move either way), and λ_init"
                  " is where λ starts: with the vectors at 0 the exponentials are both 1 and λ = λ_init.")
    matrices = ("lambda",)
    lit = frozenset({CLOSE})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("lambda", 1, len(LAMBDA_COLS))]

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return HEAD_ROW if name == "lambda" else None  # one row per head, not a token's

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        return PANE_COLS[col] if name == "lambda" else None

    def edit_cell(self, trace: TraceContext, op: Operation) -> InputCell | None:
        # the λ vectors are no pane: each cell opens at the head's row of the vector it reads first
        from qkv_tui.core.cell_edit import InputCell  # the editor loads with the first edit, not at start-up

        assert op.head is not None
        return InputCell("lambda_q1" if (op.col or 0) < 2 or op.col == 4 else "lambda_q2", None, op.head, 0)

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f = diff_of(trace, h)
        df = TABLE.of(trace.comp.scenario)
        assert df is not None
        lam = f.lam
        value = float(self.matrix(trace, "lambda", h)[0, col])
        result = fmt(value, False, d)
        if col in (0, 2):
            a, b = (df.lambda_q1[h], df.lambda_k1[h]) if col == 0 else (df.lambda_q2[h], df.lambda_k2[h])
            whole = bool(np.all(a == np.round(a)) and np.all(b == np.round(b)))
            result = fmt(value, whole, d)
            n = "1" if col == 0 else "2"
            text = f"λ_q{n}·λ_k{n} = {dot_line(a, b, whole, whole, result, d, trace.hand)}"
            refs: tuple[Ref, ...] = ()
        elif col in (1, 3):
            dot = lam.dot_1 if col == 1 else lam.dot_2
            n = "1" if col == 1 else "2"

            def attempt(p: int) -> tuple[str, bool]:
                t = operand(dot, dot == round(dot), p)
                return t, agrees(math.exp(shown(t)), result)

            t = first_fit(tries(d, False), attempt)
            text = f"e^(λ_q{n}·λ_k{n}) = e^{paren(t)} = {result}"
            refs = (Ref("lambda", h, 0, col - 1),)
        else:
            # a sum of shown decimals is exact on a calculator: written at the operands' places, then rounded
            def attempt3(p: int) -> tuple[tuple[str, str, str, str], bool]:
                e1, e2, init = (fmt(x, False, p) for x in (lam.lambda_1, lam.lambda_2, lam.lambda_init))
                total = fmt(round(shown(e1) - shown(e2) + shown(init), p), False, p)
                return (e1, e2, init, total), fmt(shown(total), False, d) == result

            e1, e2, init, total = first_fit(tries(d, False), attempt3)
            tail = f" = {total}" if total != result else ""
            text = f"λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init = {e1} − {paren(e2)} + {init}{tail} = {result}"
            refs = (Ref("lambda", h, 0, 1), Ref("lambda", h, 0, 3))
        details = (f"so each row of the map sums to 1 − λ = 1 − {result} = {fmt(round(1 - shown(result), d), False, d)}",
                   ) if col == 4 else ()
        return Operation(index, seg, row, col, value, refs, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        lam = diff_of(trace, head).lam
        out = np.array([[lam.dot_1, lam.lambda_1, lam.dot_2, lam.lambda_2, lam.value]])
        out.setflags(write=False)
        return out

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init"


class Subtract(_DiffStage):
    """weights = p₁ − λ·p₂, cell by cell: rows sum to 1 − λ, and a cell may be negative."""

    stage = Stage("diff_subtract", "Subtract",
                  "The head's map is the first minus λ times the second: weights = p₁ − λ·p₂, cell by cell."
                  " What both maps attend to (the common-mode noise the paper cancels) is reduced by λ times the"
                  " second map's weight, and cancels where that equals the first's; what only the first attends to"
                  " stays. Each row now sums to 1 − λ, not 1, and a cell where the second map"
                  " looks harder than the first is negative: this map is no longer a distribution.")
    matrices = ("weights",)
    styles = MappingProxyType({"weights": PaneStyle(heat=True, masked=True)})
    lit = frozenset({CLOSE})

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(CLOSE, f" − λ·softmax(Q₂·K₂ᵀ/{over_of(trace, op.head)}))")]

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("weights", sc.n, sc.m)]

    def worksheet_rules(self, comp: Computation) -> list[str]:
        if getattr(comp.scenario, "differential", None) is None:
            return []
        return ["- Differential attention: each head's Q and K are 2d wide. Map 1 scores columns 0…d−1 of Q against the"
                f" same columns of K, map 2 columns d…2d−1; each is divided by {over(comp.heads)} and masked, then takes"
                " its own softmax."
                " λ = e^(λ_q1·λ_k1) − e^(λ_q2·λ_k2) + λ_init, each e^ of the printed dot product; weights = p₁ − λ·p₂"
                " cell by cell (each row sums to 1 − λ, and a cell may be negative); mixed = weights·V.",
                "- Sub-norm, row by row: ms = the mean of the row's squares of mixed; normed = mixed / √(ms + eps)"
                " (times γ where the table gives gains); output = (1 − λ_init)·normed, the head's part of concat."]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f = diff_of(trace, h)
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        value = float(f.weights[row, col])
        result = fmt(value, False, d)
        refs = (Ref("weights_1", h, row, col), Ref("weights_2", h, row, col), Ref("lambda", h, 0, 4))
        if not trace.comp.allow[row, col]:
            return Operation(index, seg, row, col, value, refs, f"weights[{q},{k}] = 0 − λ·0 = 0 (masked)")
        p1, p2, lam = float(f.map_1.weights[row, col]), float(f.map_2.weights[row, col]), f.lam.value
        if trace.hand is None:
            def attempt(p: int) -> tuple[tuple[str, str, str], bool]:
                ts = (operand(p1, False, p), operand(lam, False, p), operand(p2, False, p))
                return ts, agrees(shown(ts[0]) - shown(ts[1]) * shown(ts[2]), result)

            a, b, c = first_fit(tries(d, False), attempt)
            text = f"weights[{q},{k}] = p₁ − λ·p₂ = {a} − {b}·{c} = {result}"
        else:  # by hand λ·p₂ is written down first, then taken from p₁
            lp2 = fmt(float(f.lam_p2[row, col]), False, d)
            text = (f"weights[{q},{k}] = p₁ − λ·p₂ = {fmt(p1, False, d)} − {fmt(lam, False, d)}·{fmt(p2, False, d)}"
                    f" = {fmt(p1, False, d)} − {paren(lp2)} = {result}")
        lam_t = fmt(lam, False, d)
        details: tuple[str, ...] = (f"row {q} sums to 1 − λ = 1 − {lam_t} = {fmt(round(1 - shown(lam_t), d), False, d)}",)
        if value < 0:
            details += ("negative: the second map looks here harder than the first",)
        return Operation(index, seg, row, col, value, refs, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return diff_of(trace, head).weights

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("weights_1", op.head), ("weights_2", op.head), ("weights", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("weights", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "weights = p₁ − λ·p₂"


class DiffMix(_DiffStage):
    """mixed = weights·V, V 2d wide."""

    stage = Stage("diff_mix", "Mix",
                  "The difference map multiplies V, as any head's weights do: mixed[i] = Σⱼ weights[i,j]·V[j]."
                  " V is 2d wide, both maps' values in one; a negative weight subtracts its value.")
    matrices = ("mixed",)
    parts = ((V_DOT, "·"), (V_SLOT, "V"))
    lit = frozenset({V_DOT, V_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return _both_halves(trace, head, "mixed")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f = diff_of(trace, h)
        q = trace.comp.scenario.labels[row]
        value = float(f.mixed[row, col])
        work = dot_line(f.weights[row], f.V[:, col], False, trace.integral("V", h), fmt(value, False, d), d,
                        trace.hand)
        text = f"mixed[{q},{col}] = weights[{q}]·V[:,{col}] = {work}"
        return Operation(index, seg, row, col, value, (Ref("weights", h, row), Ref("V", h, None, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return diff_of(trace, head).mixed

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("weights", op.head), ("V", op.head), ("mixed", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("mixed", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "mixed = weights·V"


class SubNorm(_DiffStage):
    """normed = RMSNorm(mixed) over each row's 2d columns (no gain unless the file gives one)."""

    stage = Stage("diff_subnorm", "Sub-norm",
                  "Each head's mixed row is RMS-normalised on its own, over its 2d columns: the paper's"
                  " GroupNorm per head. A row whose map summed to 1 − λ and partly cancelled comes out at the"
                  " same scale as any other.")
    matrices = ("normed",)
    parts = ((GATE_SLOT, " → RMSNorm"),)
    lit = frozenset({GATE_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return _both_halves(trace, head, "normed")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f = diff_of(trace, h)
        df = TABLE.of(trace.comp.scenario)
        assert df is not None
        q = trace.comp.scenario.labels[row]
        gamma = 1.0 if df.gamma is None else float(df.gamma[col])
        stats = RowStats(0.0, float(f.norm.spread[row]), float(f.norm.root[row]), df.eps)
        value = float(f.normed[row, col])
        symbolic = f"normed[{q},{col}] = mixed[{q},{col}] / √(ms + eps)·γ[{col}]"
        text, details = cell_lines(symbolic, f.mixed[row], col, value, gamma, None, stats, False, f"mixed[{q}]", d,
                                   trace.hand)
        return Operation(index, seg, row, col, value, (Ref("mixed", h, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return diff_of(trace, head).normed

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("mixed", op.head), ("normed", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("normed", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "normed = RMSNorm(mixed)"


class Factor(_DiffStage):
    """output = (1 − λ_init)·normed: the head's output, what Concat joins."""

    stage = Stage("diff_factor", "1 − λ_init",
                  "Every cell is multiplied by 1 − λ_init, the paper's fixed factor that keeps the output's scale"
                  " near a plain head's as λ starts at λ_init. This is the head's output: Concat joins it.")
    matrices = ("output",)
    parts = ((GATE_SLOT, "·(1 − λ_init)"),)
    lit = frozenset({GATE_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return _both_halves(trace, head, "output")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        f = diff_of(trace, h)
        q = trace.comp.scenario.labels[row]
        value = float(f.output[row, col])
        result = fmt(value, False, d)
        init = f.lam.lambda_init

        def attempt(p: int) -> tuple[tuple[str, str, str], bool]:
            ts = (operand(init, False, p), operand(f.factor, False, p), operand(float(f.normed[row, col]), False, p))
            return ts, agrees(1 - shown(ts[0]), ts[1], exact=False) and agrees(shown(ts[1]) * shown(ts[2]), result)

        a, b, c = first_fit(tries(d, False), attempt)
        text = f"output[{q},{col}] = (1 − λ_init)·normed[{q},{col}] = (1 − {a})·{c} = {b}·{c} = {result}"
        return Operation(index, seg, row, col, value, (Ref("normed", h, row, col),), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return trace.comp.heads[head if head is not None else 0].output

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("normed", op.head), ("output", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("output", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "output = (1 − λ_init)·normed"


SCORE_1, SCALE_1, SOFTMAX_1 = MapScore(1), MapScale(1), MapSoftmax(1)
SCORE_2, SCALE_2, SOFTMAX_2 = MapScore(2), MapScale(2), MapSoftmax(2)
LAMBDA, SUBTRACT, MIX, SUBNORM, FACTOR = Lambda(), Subtract(), DiffMix(), SubNorm(), Factor()
