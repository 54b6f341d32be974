"""The stages of [ssd] (contracts §15, Dao and Gu 2024): Mamba-2's layer as a recurrence and as masked attention,
each cell's arithmetic read from the head's SsdRecord (core/ssd_part.py).

- Steps: dt = softplus(X·W_dt + dt_bias) (or as given) and the decay a = e^(dt·A), one per token;
- Recurrence: dt·x, then every state cell h_t[i,j] = a_t·h_{t−1}[i,j] + (dt_t·x_t[i])·B_t[j], then
  y_t[i] = C_t·h_t[i,:] + D·x_t[i];
- Mask: L[i,j] = a_{j+1}·…·a_i, 1 on the diagonal, 0 above it;
- Map: C·Bᵀ, then L ∘ C·Bᵀ cell by cell;
- Attention: y = (L ∘ C·Bᵀ)·(dt·x) + D·x;
- Agree: the two forms' y, cell by cell;
- Gate and Norm, where the table gives z: y·SiLU(z), then RMSNorm over each group's columns times γ.

The one-map stages (Project, Score … Mix) step aside (teach/stages/replaced.py asks the record).
"""

from __future__ import annotations

import math
from decimal import Decimal
from types import MappingProxyType

import numpy as np

from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.ssd_part import SsdGate, SsdRecord
from qkv_tui.core.variants.ssd import TABLE
from qkv_tui.kernels.policy import round_to
from qkv_tui.kernels.ssd import SOFTPLUS_THRESHOLD
from qkv_tui.teach.arith import agrees, dot_line, first_fit, shown, tries
from qkv_tui.teach.stages.common import (
    CLOSE,
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
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.norm import RowStats, cell_lines

# each matrix's name as its lines write it (the pane's own name is prefixed, being one among every stage's)
CORNERS = {"ssd_dt": "dt", "ssd_a": "a", "ssd_xdt": "dt·x", "ssd_h": "h", "ssd_yrec": "y_rec", "ssd_L": "L",
           "ssd_G": "C·Bᵀ", "ssd_M": "M", "ssd_y": "y", "ssd_gap": "y_rec − y", "ssd_gated": "gated", "output": "out",
           "ssd_x": "x", "ssd_B": "B", "ssd_C": "C", "ssd_z": "z"}


def rec_of(trace: TraceContext, head: int | None) -> SsdRecord:
    assert head is not None
    return trace.comp.heads[head].need(SsdRecord)


def gate_of(trace: TraceContext, head: int | None) -> tuple[SsdRecord, SsdGate]:
    """The head's record and its gate, for the stages that run only where the table gives z."""
    r = rec_of(trace, head)
    assert r.gate is not None
    return r, r.gate


def like_x(trace: TraceContext, head: int | None, name: str) -> list[Plan]:
    """One matrix shaped as the head's value stream x: a row per token, a column per channel."""
    n, d = rec_of(trace, head).ssd.x.shape
    return [Plan(name, n, d)]


def group_heads(trace: TraceContext, head: int | None) -> list[int]:
    """The heads of ``head``'s group, in order: whose gated columns its norm's mean square reads, side by side."""
    group = rec_of(trace, head).group
    return [h for h, hr in enumerate(trace.comp.heads) if (r := hr.part(SsdRecord)) is not None and r.group == group]


def has_ssd(trace: TraceContext) -> bool:
    return any(h.part(SsdRecord) is not None for h in trace.comp.heads)


def _label(trace: TraceContext, row: int) -> str:
    return trace.comp.scenario.labels[row]


def _whole(m: Matrix) -> bool:
    return bool(np.all(m == np.round(m)))


class _SsdStage(StageSpec):
    """The formula line reads (L ∘ C·Bᵀ)·(dt·x) + D·x, then the gate and norm where given: Map places the pieces
    (``parts``), each stage lights its slots."""

    per_head = True
    parts: tuple[tuple[int, str], ...] = ()
    lit: frozenset[int] = frozenset()
    given: tuple[str, ...] = ()  # inputs of the [ssd] table the Markdown page prints before the stage's tables

    def runs(self, trace: TraceContext) -> bool:
        return has_ssd(trace)

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(slot, text) for slot, text in self.parts]

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """Its tables with the names its lines use in their corners, then its worked lines."""
        out: list[str] = []
        for name in self.given:  # the table's own numbers its lines read, before what they fill
            out += [page.table(name, head, CORNERS.get(name, name)), ""]
        for plan in self.segments(page.trace, head):
            out += [page.table(plan.target, head, CORNERS.get(plan.target, plan.target)), ""]
        return out + page.worked(self.stage.key, head)

    def lights(self, seg: Segment) -> frozenset[int]:
        return self.lit

    def op(self, index: int, seg: Segment, row: int, col: int, value: float, refs: tuple[Ref, ...], text: str,
           details: tuple[str, ...] = ()) -> Operation:
        return Operation(index, seg, row, col, value, refs, text, details)


class Steps(_SsdStage):
    stage = Stage("ssd_steps", "Steps",
                  "Each token chooses its own step dt = softplus(X·W_dt + dt_bias) (always > 0), and the head's"
                  " decay rate A < 0 turns it into a decay a = e^(dt·A), between 0 and 1: how much of the state"
                  " survives this token. A large step forgets more of the past and writes more of the present.")
    matrices = ("ssd_dt", "ssd_a")
    lit = frozenset({OPEN})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n = trace.comp.scenario.n
        return [Plan("ssd_dt", n, 1), Plan("ssd_a", n, 1)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None
        r = rec_of(trace, h)
        t = _label(trace, row)
        if seg.target == "ssd_dt":
            return self._dt(trace, index, seg, r, h, row, t, d)
        dt, A = float(r.ssd.dt[row]), r.ssd.A
        value = float(r.ssd.a[row])
        result = fmt(value, False, d)
        prod = dt * A
        if trace.hand is not None:  # by hand dt·A is written down first (kernels/ssd.py ssd_head)
            prod = float(round_to(np.array(prod), trace.hand))  # as the kernel's policy rounds it, ties included

        def attempt(p: int) -> tuple[tuple[str, str, str], bool]:
            ts = (operand(dt, False, p), operand(A, round(A) == A, p), operand(prod, False, p))
            ok = agrees(shown(ts[0]) * shown(ts[1]), ts[2].strip("()"), exact=False) and agrees(
                math.exp(shown(ts[2])), result)
            if trace.hand is None:
                ok = ok and agrees(math.exp(shown(ts[0]) * shown(ts[1])), result)
            return ts, ok

        a, b, c = first_fit(tries(d, False), attempt)
        text = f"a[{t}] = e^(dt[{t}]·A) = e^({a}·{b}) = e^{c} = {result}"
        details = (f"A = {fmt(A, round(A) == A, d)} for this head: a is below 1 because dt > 0 and A < 0",)
        return self.op(index, seg, row, 0, value, (Ref("ssd_dt", h, row, 0),), text, details)

    def _dt(self, trace: TraceContext, index: int, seg: Segment, r: SsdRecord, h: int, row: int, t: str,
            d: int) -> Operation:
        value = float(r.ssd.dt[row])
        result = fmt(value, False, d)
        if r.summed is None:
            return self.op(index, seg, row, 0, value, (), f"dt[{t}] = {result} (given in [ssd] dt)")
        s = TABLE.of(trace.comp.scenario)
        assert s is not None and s.W_dt is not None
        x_row = trace.comp.scenario.X if trace.comp.norm is None else trace.comp.norm.X_norm
        X_t, w = x_row[row], s.W_dt[:, h]
        summed = float(r.summed[row])
        raw = summed if summed <= SOFTPLUS_THRESHOLD else math.inf
        low, high = r.dt_limit
        soft = math.log1p(math.exp(raw)) if raw != math.inf else summed
        clipped = soft < low or soft > high

        def attempt(p: int) -> tuple[str, bool]:
            st = fmt(summed, False, p)
            if summed > SOFTPLUS_THRESHOLD:
                return st, True
            return st, clipped or agrees(math.log1p(math.exp(shown(st))), result)

        s_t = first_fit(tries(d, False), attempt)
        terms = [*X_t, 1.0]
        weights = [*w, float(s.dt_bias[h])]
        work = dot_line(np.array(terms), np.array(weights), _whole(np.array(terms)), _whole(np.array(weights)), s_t,
                        len(s_t.partition(".")[2]), trace.hand)
        text = f"s[{t}] = [X[{t}], 1]·[W_dt[:,{h}], dt_bias[{h}]] = {work}; "
        if summed > SOFTPLUS_THRESHOLD:
            text += f"dt[{t}] = softplus(s) = s = {result} (above {SOFTPLUS_THRESHOLD:g}, softplus is the input itself)"
        elif clipped:
            text += (f"dt[{t}] = ln(1 + e^{paren(s_t)}) = {fmt(soft, False, d)}, clamped to"
                     f" [{fmt(low, False, d)}, {fmt(high, False, d)}] → {result}")
        else:
            text += f"dt[{t}] = softplus(s) = ln(1 + e^{paren(s_t)}) = {result}"
        return self.op(index, seg, row, 0, value, (), text,
                       ("softplus(s) = ln(1 + eˢ) is above 0 for every s: a step is never negative",))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        r = rec_of(trace, head)
        return (r.ssd.dt if name == "ssd_dt" else r.ssd.a)[:, None]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_dt", op.head), ("ssd_a", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("ssd_a", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "dt = softplus(s)" if name == "ssd_dt" else "a = e^(dt·A)"


class Recurrence(_SsdStage):
    stage = Stage("ssd_recurrence", "Recurrence",
                  "The recurrent form, one token at a time: the state h (d × d_state per head) first decays by a_t,"
                  " then adds (dt_t·x_t)·B_tᵀ; the output reads it with C_t and adds the skip D·x_t."
                  " h_t = a_t·h_{t−1} + (dt_t·x_t)·B_tᵀ, y_t = h_t·C_t + D·x_t. The state is all a Mamba-2 layer"
                  " keeps between tokens: its size does not grow with the sequence. Cell i,j of h_t is in column"
                  " i·d_state + j of its pane.")
    matrices = ("ssd_x", "ssd_B", "ssd_C", "ssd_xdt", "ssd_h", "ssd_yrec")
    given = ("ssd_x", "ssd_B", "ssd_C")
    lit = frozenset({Q_SLOT, K_SLOT, V_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        s = rec_of(trace, head).ssd
        n, d, N = s.x.shape[0], s.x.shape[1], s.B.shape[1]
        return [Plan("ssd_xdt", n, d), Plan("ssd_h", n, d * N), Plan("ssd_yrec", n, d)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        s = rec_of(trace, h).ssd
        t = _label(trace, row)
        x_int = trace.integral("ssd_x", h)
        if seg.target == "ssd_xdt":
            value = float(s.xdt[row, col])
            work = dot_line(np.array([s.dt[row]]), np.array([s.x[row, col]]), False, x_int, fmt(value, False, d), d,
                            trace.hand)
            return self.op(index, seg, row, col, value, (Ref("ssd_dt", h, row, 0), Ref("ssd_x", h, row, col)),
                           f"(dt·x)[{t},{col}] = dt[{t}]·x[{t},{col}] = {work}")
        N = s.B.shape[1]
        if seg.target == "ssd_h":
            i, j = divmod(col, N)
            value = float(s.states[row, i, j])
            before = float(s.states[row - 1, i, j]) if row else 0.0
            prev = f"h[{_label(trace, row - 1)}][{i},{j}]" if row else "0"
            work = dot_line(np.array([s.a[row], s.xdt[row, i]]), np.array([before, s.B[row, j]]), False,
                            False, fmt(value, False, d), d, trace.hand)
            text = f"h[{t}][{i},{j}] = a[{t}]·{prev} + (dt·x)[{t},{i}]·B[{t},{j}] = {work}"
            refs: tuple[Ref, ...] = (Ref("ssd_a", h, row, 0), Ref("ssd_xdt", h, row, i), Ref("ssd_B", h, row, j))
            if row:
                refs += (Ref("ssd_h", h, row - 1, col),)
            details = ("the state starts at 0: the first token's h is its own write",) if not row else ()
            return self.op(index, seg, row, col, value, refs, text, details)
        value = float(s.y_recurrent[row, col])
        hs = s.states[row, col]  # (N,)
        reads = np.array([*s.C[row], s.D])
        work = dot_line(reads, np.array([*hs, s.x[row, col]]), _whole(reads), False, fmt(value, False, d), d, trace.hand)
        text = f"y_rec[{t},{col}] = C[{t}]·h[{t}][{col},:] + D·x[{t},{col}] = {work}"
        return self.op(index, seg, row, col, value, (Ref("ssd_C", h, row), Ref("ssd_h", h, row), Ref("ssd_x", h, row, col)),
                       text, (f"D = {fmt(s.D, round(s.D) == s.D, d)}, the skip that passes x straight through",))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        s = rec_of(trace, head).ssd
        n = s.x.shape[0]
        return {"ssd_x": s.x, "ssd_B": s.B, "ssd_C": s.C, "ssd_xdt": s.xdt, "ssd_h": s.states.reshape(n, -1),
                "ssd_yrec": s.y_recurrent}[name]

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return [] if name in ("ssd_x", "ssd_B", "ssd_C") else None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "ssd_xdt":
            return [("ssd_dt", h), ("ssd_x", h), ("ssd_xdt", h)]
        if op.segment.target == "ssd_h":
            return [("ssd_a", h), ("ssd_xdt", h), ("ssd_B", h), ("ssd_h", h)]
        return [("ssd_C", h), ("ssd_h", h), ("ssd_yrec", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("ssd_h", head), ("ssd_yrec", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"ssd_x": "x (the value stream)", "ssd_B": "B (the write key)", "ssd_C": "C (the read query)",
                "ssd_xdt": "dt·x", "ssd_h": "h_t (the state)",
                "ssd_yrec": "y_rec (recurrence)"}[name]


class Mask(_SsdStage):
    stage = Stage("ssd_mask", "Mask L",
                  "Unroll the recurrence: what token j wrote reaches token i after every later token's decay,"
                  " so L[i,j] = a_{j+1}·…·a_i, 1 on the diagonal (nothing has decayed yet) and 0 above it (a later"
                  " token). L is the causal mask of attention with its ones faded by the decays: the dual of the"
                  " 0/1 triangle.")
    matrices = ("ssd_L",)
    lit = frozenset({OPEN})
    key_columns = matrices
    styles = MappingProxyType({"ssd_L": PaneStyle(heat=True)})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n = trace.comp.scenario.n
        return [Plan("ssd_L", n, n)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        s = rec_of(trace, h).ssd
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        value = float(s.L[row, col])
        if col > row:
            return self.op(index, seg, row, col, value, (), f"L[{q},{k}] = 0 ({k} comes after {q})")
        if col == row:
            return self.op(index, seg, row, col, value, (), f"L[{q},{k}] = 1 (no decay yet: the token's own write)")
        result = fmt(value, False, d)
        factors = list(range(col + 1, row + 1))
        refs = tuple(Ref("ssd_a", h, k_, 0) for k_ in factors)
        if trace.hand is not None and len(factors) > 2:  # by hand each product is rounded: L[i,j+1]·a_{j+1}
            work = dot_line(np.array([s.L[row, col + 1]]), np.array([s.a[col + 1]]), False, False, result, d,
                            trace.hand)
            text = f"L[{q},{k}] = L[{q},{sc.key_labels[col + 1]}]·a[{sc.labels[col + 1]}] = {work}"
            return self.op(index, seg, row, col, value, refs, text)
        names = "·".join(f"a[{sc.labels[k_]}]" for k_ in factors)

        def attempt(p: int) -> tuple[str, bool]:
            ts = [operand(float(s.a[k_]), False, p) for k_ in factors]
            return "·".join(ts), agrees(math.prod(shown(x.strip("()")) for x in ts), result)

        work = first_fit(tries(d, False), attempt)
        text = f"L[{q},{k}] = {names} = {work} = {result}" if len(factors) > 1 else f"L[{q},{k}] = {names} = {result}"
        return self.op(index, seg, row, col, value, refs, text,
                       (f"what {k} wrote has decayed through every token after it, up to {q}",))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return rec_of(trace, head).ssd.L

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_a", op.head), ("ssd_L", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("ssd_L", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "L (the decay mask)"


class Map(_SsdStage):
    stage = Stage("ssd_map", "Map",
                  "The attention form's map: C plays the query, B the key, so C·Bᵀ is a score matrix, never"
                  " exponentiated; L ∘ C·Bᵀ masks and fades it cell by cell. Its rows need not sum to 1.")
    matrices = ("ssd_G", "ssd_M")
    parts = ((OPEN, "(L ∘ "), (Q_SLOT, "C"), (QK_DOT, "·"), (K_SLOT, "Bᵀ"), (CLOSE, ")"), (V_DOT, "·"),
             (V_SLOT, "(dt·x) + D·x"))
    lit = frozenset({OPEN, Q_SLOT, QK_DOT, K_SLOT, CLOSE})
    key_columns = matrices
    styles = MappingProxyType({"ssd_M": PaneStyle(heat=True)})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n = trace.comp.scenario.n
        return [Plan("ssd_G", n, n), Plan("ssd_M", n, n)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        s = rec_of(trace, h).ssd
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        if seg.target == "ssd_G":
            value = float(s.G[row, col])
            whole = trace.integral("ssd_C", h) and trace.integral("ssd_B", h)
            work = dot_line(s.C[row], s.B[col], whole, whole, fmt(value, whole, d), d, trace.hand)
            return self.op(index, seg, row, col, value, (Ref("ssd_C", h, row), Ref("ssd_B", h, col)),
                           f"(C·Bᵀ)[{q},{k}] = C[{q}]·B[{k}] = {work}")
        value = float(s.M[row, col])
        refs = (Ref("ssd_L", h, row, col), Ref("ssd_G", h, row, col))
        if col > row:
            return self.op(index, seg, row, col, value, refs, f"M[{q},{k}] = L·(C·Bᵀ) = 0 (L is 0: {k} comes later)")
        work = dot_line(np.array([s.L[row, col]]), np.array([s.G[row, col]]), row == col,
                        trace.integral("ssd_G", h), fmt(value, False, d), d, trace.hand)
        return self.op(index, seg, row, col, value, refs, f"M[{q},{k}] = L[{q},{k}]·(C·Bᵀ)[{q},{k}] = {work}")

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        s = rec_of(trace, head).ssd
        return s.G if name == "ssd_G" else s.M

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return [("ssd_C", head), ("ssd_B", head)] if name == "ssd_G" else None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "ssd_G":
            return [("ssd_C", h), ("ssd_B", h), ("ssd_G", h)]
        return [("ssd_L", h), ("ssd_G", h), ("ssd_M", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("ssd_M", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "C·Bᵀ" if name == "ssd_G" else "M = L ∘ C·Bᵀ"


class Attention(_SsdStage):
    stage = Stage("ssd_attention", "Attention",
                  "The same layer as masked attention, all tokens at once: y = (L ∘ C·Bᵀ)·(dt·x) + D·x. Each"
                  " row of the map mixes the earlier tokens' dt·x, as attention's weights mix V.")
    matrices = ("ssd_y",)
    lit = frozenset({V_DOT, V_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return like_x(trace, head, "ssd_y")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        s = rec_of(trace, h).ssd
        t = _label(trace, row)
        value = float(s.y_attention[row, col])
        seen = row + 1  # M is 0 after the query: only the visible terms
        work = dot_line(np.array([*s.M[row, :seen], s.D]), np.array([*s.xdt[:seen, col], s.x[row, col]]), False,
                        False, fmt(value, False, d), d, trace.hand)
        text = f"y[{t},{col}] = M[{t}]·(dt·x)[:,{col}] + D·x[{t},{col}] = {work}"
        return self.op(index, seg, row, col, value, (Ref("ssd_M", h, row), Ref("ssd_xdt", h, None, col),
                                                     Ref("ssd_x", h, row, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return rec_of(trace, head).ssd.y_attention

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_M", op.head), ("ssd_xdt", op.head), ("ssd_y", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("ssd_y", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "y (attention form)"


FULL = 16  # decimals of a mantissa that give float64's 17 significant digits: every float64 read back exactly
MAX_MANTISSA = 30  # past it a gap is lost in the operands' digits anyway; the line keeps the last tried


def _mantissa(v: float, p: int) -> str:
    text = f"{v:.{p}e}"  # Python writes a float's exact binary value, correctly rounded to p decimals
    return f"({text})" if v < 0 else text


class Agree(_SsdStage):
    stage = Stage("ssd_agree", "Agree",
                  "The state-space duality: the recurrence and the masked attention are one computation, so"
                  " their outputs agree cell by cell. The recurrence costs O(n) in time with a fixed-size state;"
                  " the attention form is a matrix product, which is what GPUs are fast at (Mamba-2 runs it"
                  " chunk by chunk).")
    matrices = ("ssd_gap",)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return like_x(trace, head, "ssd_gap")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        s = rec_of(trace, h).ssd
        t = _label(trace, row)
        a, b = float(s.y_recurrent[row, col]), float(s.y_attention[row, col])
        value = a - b
        result = fmt(value, False, d)

        def attempt(p: int) -> tuple[tuple[str, str], bool]:
            ts = (operand(a, False, p), operand(b, False, p))
            return ts, agrees(shown(ts[0].strip("()")) - shown(ts[1].strip("()")), result, exact=p == d)

        def mantissas(p: int) -> tuple[tuple[str, str], bool]:
            # two huge outputs a rounding apart: their gap shows only past float64's 17 digits, so the digits are
            # the floats' own exact decimals, as many as make the difference on paper (not only in float64) agree
            ts = (_mantissa(a, p), _mantissa(b, p))
            on_paper = float(Decimal(ts[0].strip("()")) - Decimal(ts[1].strip("()")))
            return ts, agrees(on_paper, result) and agrees(shown(ts[0].strip("()")) - shown(ts[1].strip("()")), result)

        fit = next((texts for texts, ok in map(attempt, tries(d, False)) if ok), None)
        x, y = fit if fit is not None else first_fit(range(FULL, MAX_MANTISSA + 1), mantissas)
        text = f"y_rec[{t},{col}] − y[{t},{col}] = {x} − {y} = {result}"
        same = "the two forms agree" if abs(value) < 10.0 ** -d / 2 else "the two forms differ by rounding only"
        return self.op(index, seg, row, col, value, (Ref("ssd_yrec", h, row, col), Ref("ssd_y", h, row, col)), text,
                       (same,))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        s = rec_of(trace, head).ssd
        return s.y_recurrent - s.y_attention

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_yrec", op.head), ("ssd_y", op.head), ("ssd_gap", op.head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "y_rec − y"


class Gate(_SsdStage):
    stage = Stage("ssd_gate", "Gate",
                  "A Mamba-2 layer gates y with its z stream: y·SiLU(z), SiLU(z) = z·σ(z) = z / (1 + e^(−z)),"
                  " before the norm (transformers' MambaRMSNormGated, norm_before_gate=False).")
    matrices = ("ssd_z", "ssd_gated")
    given = ("ssd_z",)
    parts = ((GATE_SLOT, " → ·SiLU(z) → RMSNorm"),)
    lit = frozenset({GATE_SLOT})

    def runs(self, trace: TraceContext) -> bool:
        return any((r := h.part(SsdRecord)) is not None and r.gate is not None for h in trace.comp.heads)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return like_x(trace, head, "ssd_gated")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        r, g = gate_of(trace, h)
        t = _label(trace, row)
        y, z, sz = float(r.ssd.y[row, col]), float(g.z[row, col]), float(g.silu_z[row, col])
        value = float(g.gated[row, col])
        result = fmt(value, False, d)
        z_int = z == round(z)

        def attempt(p: int) -> tuple[tuple[str, str, str], bool]:
            ts = (operand(y, False, p), operand(z, z_int, p), operand(sz, False, p))
            zv = shown(ts[1].strip("()"))
            ok = agrees(_silu(zv), ts[2].strip("()")) and agrees(
                shown(ts[0].strip("()")) * shown(ts[2].strip("()")), result)
            if trace.hand is None:
                ok = ok and agrees(shown(ts[0].strip("()")) * _silu(zv), result)
            return ts, ok

        yt, zt, st = first_fit(tries(d, False), attempt)
        neg = zt.strip("()")
        neg = neg[1:] if neg.startswith("-") else neg if shown(neg) == 0 else f"-{neg}"
        text = (f"gated[{t},{col}] = y[{t},{col}]·SiLU(z[{t},{col}]) = {yt}·({zt} / (1 + e^{paren(neg)}))"
                f" = {yt}·{st} = {result}")
        return self.op(index, seg, row, col, value, (Ref("ssd_y", h, row, col), Ref("ssd_z", h, row, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        g = gate_of(trace, head)[1]
        return g.z if name == "ssd_z" else g.gated

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return [] if name == "ssd_z" else None

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_y", op.head), ("ssd_z", op.head), ("ssd_gated", op.head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "z (the gate stream)" if name == "ssd_z" else "y·SiLU(z)"


class Norm(_SsdStage):
    stage = Stage("ssd_norm", "Norm",
                  "The gated rows are RMS-normalised group by group (the heads of one group share one mean"
                  " square, over all their columns) and multiplied by γ: the head's output, what Concat joins.")
    # the group's gated rows (every head's of the group) are what the mean square reads: a head's own Gate shows
    # only its columns, and on a page the other heads' come later, so the stage shows the group's before its own
    matrices = ("ssd_group", "output")
    runs = Gate.runs
    lit = frozenset({GATE_SLOT})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return like_x(trace, head, "output")

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        """The group's gated rows, each column named by its head (h2:0 is head 2's column 0), then its own."""
        trace = page.trace
        group = gate_of(trace, head)[1].group_gated
        cols = [f"h{h + 1}:{c}" for h in group_heads(trace, head) for c in range(rec_of(trace, h).ssd.x.shape[1])]
        rows = [_label(trace, i) for i in range(group.shape[0])]
        r = rec_of(trace, head)
        out = [page.array(group, rows, cols, f"gated, group {r.group + 1}", False), ""]
        return out + super().markdown(page, head)

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        r, g = gate_of(trace, h)
        t = _label(trace, row)
        value = float(g.normed[row, col])
        stats = RowStats(0.0, float(g.spread[row]), float(g.root[row]), g.eps)
        symbolic = f"out[{t},{col}] = gated[{t},{col}] / √(ms + eps)·γ[{col}]"
        text, details = cell_lines(symbolic, g.group_gated[row], g.first + col, value, float(g.gamma[col]), None,
                                   stats, False, f"gated[{t}] over group {r.group + 1}", d, trace.hand)
        return self.op(index, seg, row, col, value, (Ref("ssd_group", h, row),), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if name == "ssd_group":
            return gate_of(trace, head)[1].group_gated
        return trace.comp.heads[head if head is not None else 0].output

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("ssd_group", op.head), ("output", op.head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "ssd_group" and head is not None:
            heads = group_heads(trace, head)
            d = rec_of(trace, head).ssd.x.shape[1]
            spans = ", ".join(f"h{h + 1}: cols {k * d}…{(k + 1) * d - 1}" if d > 1 else f"h{h + 1}: col {k}"
                              for k, h in enumerate(heads))
            return f"gated, group {rec_of(trace, head).group + 1} ({spans})"
        return "output = RMSNorm(gated)·γ"


STEPS, RECURRENCE, MASK, MAP = Steps(), Recurrence(), Mask(), Map()
ATTENTION, AGREE, GATE, NORM = Attention(), Agree(), Gate(), Norm()


def _silu(v: float) -> float:
    """z / (1 + e^−z) as a calculator gives it, without math.exp's OverflowError for a z far below 0 (where
    e^−z is ∞ and the quotient is −0)."""
    if v >= 0:
        return v / (1 + math.exp(-v))
    if v < -700:  # e^−z past float64: z / ∞
        return -0.0
    return v / (1 + math.exp(-v))
