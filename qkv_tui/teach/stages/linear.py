"""Linear attention's stages (Katharopoulos et al. 2020), in place of Score … Mix under ``[linear]``:

- Feature: φ(Q) and φ(K), cell by cell;
- Quadratic: A = φ(Q)φ(K)ᵀ masked (0 where a key comes later), each row ÷ its sum, times V;
- Recurrent: the state S_t = S_{t−1} + φ(k_t)v_tᵀ and z_t = z_{t−1} + φ(k_t), each cell a step, then
  o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t, with the line that it is the quadratic form's output and the memory
  each form keeps.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.engine import Computation, HeadResult
from qkv_tui.core.fmt import fmt, vector
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.kernels.linear import LinearForward, feature
from qkv_tui.teach.arith import MAX_TERMS, dot_line, fit
from qkv_tui.teach.stages.common import (
    CLOSE,
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
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, formula_cell, grads, has_backward
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.score import scored, scored_names

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.gradients import HeadGrad
    from qkv_tui.core.scenario import Scenario
    from qkv_tui.kernels.linear_backward import LinearBack


def _back(hg: HeadGrad) -> LinearBack | None:
    """The head's [linear] read backwards (core/grad_faces/linear.py)."""
    from qkv_tui.kernels.linear_backward import LinearBack  # with the head's gradients

    return hg.part(LinearBack)


PHI_TEXT = {"elu1": "elu(x) + 1", "relu": "max(x, 0)", "identity": "x"}


def _lin(trace: TraceContext, head: int) -> HeadResult:
    return trace.comp.heads[head]


def _linear_at(trace: TraceContext, head: int | None) -> tuple[int, HeadResult, LinearForward]:
    """A segment's head, its result and its linear attention: the stages run only under [linear]."""
    assert head is not None
    hr = _lin(trace, head)
    return head, hr, hr.need(LinearForward)


def _linear_matrices(trace: TraceContext, head: int | None, name: str) -> LinearForward:
    """The head's linear attention, for a pane's matrix: a KeyError where it has none (or no head is named)."""
    if head is None:
        raise KeyError(name)
    lin = _lin(trace, head).part(LinearForward)
    if lin is None:
        raise KeyError(name)
    return lin


def _on(trace: TraceContext) -> bool:
    return trace.comp.scenario.linear is not None


# --- the worksheet: each table worked from the printed tables before it (teach/stages/printed.py) -------------


def _sheet_names(chain_or_cells: PrintedChain | PrintedCells, h: int) -> tuple[str, str, str, str]:
    qn, kn, qs, ks = scored_names(chain_or_cells.comp.heads[h])
    return f"{qn}.{h}", f"{kn}.{h}", qs, ks


def _feature_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    assert head is not None
    sc, h = chain.sc, head
    assert sc.linear is not None
    qk, kk, qs, ks = _sheet_names(chain, h)
    d_k = sc.heads[h].d_k
    text = PHI_TEXT[sc.linear.feature]
    return [Table(f"phi_Q.{h}", f"φ({qs})", f"φ({qs}), φ(x) = {text}", "phi", h,
                  feature(chain.values(qk), sc.linear.feature, chain.page), sc.labels, idx(d_k), False, True),
            Table(f"phi_K.{h}", f"φ({ks})", f"φ({ks})", "phi", h,
                  feature(chain.values(kk), sc.linear.feature, chain.page), sc.labels, idx(d_k), False, True)]


def _feature_line(self: StageSpec, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None and cells.sc.linear is not None
    qk, kk, _, _ = _sheet_names(cells, h)
    src = qk if table.key.startswith("phi_Q") else kk
    x = cells.txt(src, row, col)
    cell = f"{table.name}[{cells.sc.labels[row]},{col}]"
    kind = cells.sc.linear.feature
    if kind == "elu1":
        positive = float(cells.tables[src].values[row, col]) > 0
        return f"{cell} = {x} + 1 = {answer}" if positive else f"{cell} = e^{x} = {answer}"
    if kind == "relu":
        return f"{cell} = max({x}, 0) = {answer}"
    return f"{cell} = {x} = {answer}"


def _quadratic_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    assert head is not None
    sc, h = chain.sc, head
    phi_Q, phi_K = chain.values(f"phi_Q.{h}"), chain.values(f"phi_K.{h}")
    A = chain.rounded(np.where(sc.allow, phi_Q @ phi_K.T, 0.0))  # (n, n)
    out = [Table(f"lin_A.{h}", "A", "A = φ(Q)φ(K)ᵀ, 0 where the key comes after the query", "quadratic", h, A,
                 sc.labels, sc.key_labels, False, True, sc.allow)]
    weights = A
    if _normalised_sc(chain.sc):
        weights = chain.rounded(A / A.sum(axis=1)[:, None])  # (n, n)
        out.append(Table(f"lin_W.{h}", "W", "W = A ÷ its row sum", "quadratic", h, weights, sc.labels, sc.key_labels,
                         False, True, sc.allow))
    output = chain.rounded(weights @ chain.values(f"V.{h}"))  # (n, d_v)
    return [*out, Table(f"output.{h}", "output", "output = W·V" if weights is not A else "output = A·V", "quadratic", h,
                        output, sc.labels, idx(sc.heads[h].d_v), False, True)]


def _quadratic_line(self: StageSpec, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None
    sc = cells.sc
    q = sc.labels[row]
    if table.name == "A":
        k = sc.key_labels[col]
        width = cells.tables[f"phi_Q.{h}"].values.shape[1]
        terms = " + ".join(f"{cells.txt(f'phi_Q.{h}', row, c)}·{cells.txt(f'phi_K.{h}', col, c)}" for c in range(width))
        return f"A[{q},{k}] = φ(Q)[{q}]·φ(K)[{k}] = {terms} = {answer}"
    if table.name == "W":
        k = sc.key_labels[col]
        terms = " + ".join(cells.txt(f"lin_A.{h}", row, c) for c in range(sc.m) if sc.allow[row, c])
        return f"W[{q},{k}] = A[{q},{k}] / Σ A[{q}] = {cells.txt(f'lin_A.{h}', row, col)} / ({terms}) = {answer}"
    w = f"lin_W.{h}" if f"lin_W.{h}" in cells.tables else f"lin_A.{h}"
    return f"output[{q},{col}] = W[{q}]·V[:,{col}] = {cells.dot(w, row, f'V.{h}', col)} = {answer}"


def _recurrent_tables(self: StageSpec, chain: PrintedChain, head: int | None) -> list[Table]:
    assert head is not None
    sc, h = chain.sc, head
    hr = sc.heads[h]
    phi_Q, phi_K, V = chain.values(f"phi_Q.{h}"), chain.values(f"phi_K.{h}"), chain.values(f"V.{h}")
    n, d_k, d_v = sc.n, hr.d_k, hr.d_v
    S, z = np.zeros((n, d_k * d_v)), np.zeros((n, d_k))
    for t in range(n):  # each row from the row printed above it
        prev_S = S[t - 1] if t else np.zeros(d_k * d_v)
        prev_z = z[t - 1] if t else np.zeros(d_k)
        S[t] = chain.rounded(prev_S + np.outer(phi_K[t], V[t]).reshape(-1))
        z[t] = chain.rounded(prev_z + phi_K[t])
    cols = tuple(f"{i},{j}" for i in range(d_k) for j in range(d_v))
    out = [Table(f"lin_S.{h}", "S", "S_t = S_{t−1} + φ(k_t)v_tᵀ, the state after each token", "recurrent", h, S,
                 sc.labels, cols, False, True)]
    numer = np.einsum("ti,tij->tj", phi_Q, S.reshape(n, d_k, d_v))  # (n, d_v)
    if _normalised_sc(sc):
        out.append(Table(f"lin_z.{h}", "z", "z_t = z_{t−1} + φ(k_t)", "recurrent", h, z, sc.labels, idx(d_k), False, True))
        numer = numer / np.einsum("ti,ti->t", phi_Q, z)[:, None]
    return [*out, Table(f"lin_o.{h}", "o", "o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t", "recurrent", h, chain.rounded(numer),
                        sc.labels, idx(d_v), False, True)]


def _recurrent_line(self: StageSpec, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None
    sc = cells.sc
    hr = sc.heads[h]
    t = sc.labels[row]
    before = sc.labels[row - 1] if row else ""
    if table.name == "S":
        i, j = divmod(col, hr.d_v)
        product = f"{cells.txt(f'phi_K.{h}', row, i)}·{cells.txt(f'V.{h}', row, j)}"
        if not row:
            return f"S[{t}][{i},{j}] = φ(K)[{t},{i}]·V[{t},{j}] = {product} = {answer}"
        return (f"S[{t}][{i},{j}] = S[{before}][{i},{j}] + φ(K)[{t},{i}]·V[{t},{j}]"
                f" = {cells.txt(f'lin_S.{h}', row - 1, col)} + {product} = {answer}")
    if table.name == "z":
        if not row:
            return f"z[{t},{col}] = 0 + φ(K)[{t},{col}] = 0 + {cells.txt(f'phi_K.{h}', row, col)} = {answer}"
        return (f"z[{t},{col}] = z[{before},{col}] + φ(K)[{t},{col}]"
                f" = {cells.txt(f'lin_z.{h}', row - 1, col)} + {cells.txt(f'phi_K.{h}', row, col)} = {answer}")
    num = " + ".join(f"{cells.txt(f'phi_Q.{h}', row, i)}·{cells.txt(f'lin_S.{h}', row, i * hr.d_v + col)}"
                     for i in range(hr.d_k))
    if f"lin_z.{h}" not in cells.tables:
        return f"o[{t},{col}] = φ(Q)[{t}]·S[{t}][:,{col}] = {num} = {answer}"
    den = " + ".join(f"{cells.txt(f'phi_Q.{h}', row, i)}·{cells.txt(f'lin_z.{h}', row, i)}" for i in range(hr.d_k))
    return f"o[{t},{col}] = φ(Q)[{t}]·S[{t}][:,{col}] / φ(Q)[{t}]·z[{t}] = ({num}) / ({den}) = {answer}"


def _normalised_sc(sc: Scenario) -> bool:
    return sc.linear is not None and sc.linear.normalize


def _normalised(trace: TraceContext) -> bool:
    return _normalised_sc(trace.comp.scenario)


def _rules(self: StageSpec, comp: Computation) -> list[str]:
    lin = comp.scenario.linear
    if lin is None:
        return []
    return [f"- Linear attention (no softmax, no scale): φ(x) = {PHI_TEXT[lin.feature]} on every cell of Q and K;"
            " A = φ(Q)φ(K)ᵀ with 0 where a key comes after its query" + (", each row divided by its sum" if lin.normalize
                                                                         else "") + ", times V.",
            "- The recurrent form from the printed tables: S_t = S_{t−1} + φ(k_t)v_tᵀ (cell [i,j] in column i,j),"
            " z_t = z_{t−1} + φ(k_t), o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t: the same numbers as output, up to rounding."]



class Feature(StageSpec):
    stage = Stage("phi", "Feature",
                  "Linear attention swaps the softmax's e^(q·k/√dₖ) for φ(q)·φ(k): each Query and Key cell goes"
                  " through the feature map φ. Two things follow, each for its own reason. The reuse comes from the"
                  " factorisation: φ(q)·φ(k) splits into a query part and a key part, so by associativity"
                  " (φ(Q)φ(K)ᵀ)V = φ(Q)(φ(K)ᵀV), and the keys' sum Σ φ(k)vᵀ is built once and reused by every later"
                  " query, whatever φ is, the identity included. The sign comes from φ: where φ ≥ 0 every similarity"
                  " φ(q)·φ(k) is ≥ 0, as e^x is, and so is each row's normaliser φ(q)·z, their sum.")
    per_head = True
    matrices = ("phi_Q", "phi_K")

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        lin = trace.comp.scenario.linear
        assert lin is not None
        text = f"φ(x) = {PHI_TEXT[lin.feature]}. "
        text += self.stage.meaning
        if lin.feature == "identity":
            text += (" With φ(x) = x the products are the plain scores Q·K: the reuse holds, but nothing keeps them"
                     " ≥ 0, so a row's sum may be 0 or negative (hence normalize = false).")
        elif lin.feature == "relu":
            text += " relu's zeros can leave a row's normaliser at 0 (refused, naming the row)."
        else:
            text += " elu(x) + 1 is above 0 everywhere, so the normaliser is never 0."
        return text

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, d_k = trace.comp.scenario, trace.comp.heads[head].d_k
        return [Plan("phi_Q", sc.n, d_k), Plan("phi_K", sc.n, d_k)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        h, hr, lin = _linear_at(trace, seg.head)
        sc = trace.comp.scenario
        assert sc.linear is not None
        qn, kn, qs, ks = scored(trace)
        is_q = seg.target == "phi_Q"
        src, name = (qn, qs) if is_q else (kn, ks)
        x = float((hr.Q_used if is_q else hr.K_used)[row, col])
        value = float((lin.phi_Q if is_q else lin.phi_K)[row, col])
        label = sc.labels[row]
        cell = f"φ({name})[{label},{col}]"
        of = f"{name}[{label},{col}]"
        kind = sc.linear.feature
        if kind == "elu1" and x > 0:
            (xt,), res = fit(lambda a: a + 1, [x], value, d)
            text = f"{cell} = elu({of}) + 1 = {of} + 1 = {xt} + 1 = {res}"
        elif kind == "elu1":
            (xt,), res = fit(math.exp, [x], value, d)
            text = f"{cell} = elu({of}) + 1 = e^{of} = e^{xt} = {res}"
        elif kind == "relu":
            (xt,), res = fit(lambda a: max(a, 0.0), [x], value, d)
            text = f"{cell} = max({xt}, 0) = {res}"
        else:
            text = f"{cell} = {of} = {fmt(value, False, d)}"
        return Operation(index, seg, row, col, value, (Ref(src, h, row, col),), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        lin = _linear_matrices(trace, head, name)
        return lin.phi_Q if name == "phi_Q" else lin.phi_K

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        qn, kn, _, _ = scored(trace)
        return [(qn if op.segment.target == "phi_Q" else kn, op.head), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("phi_Q", head), ("phi_K", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        _, _, qs, ks = scored(trace)
        return f"φ({qs})" if name == "phi_Q" else f"φ({ks})"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        _, _, qs, ks = scored(trace)
        return [FormulaPart(Q_SLOT, f"φ({qs})"), FormulaPart(QK_DOT, "·"), FormulaPart(K_SLOT, f"φ({ks})ᵀ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT} if seg.target == "phi_Q" else {K_SLOT})

    worksheet_tables = _feature_tables
    worksheet_line = _feature_line
    worksheet_rules = _rules


class Quadratic(StageSpec):
    stage = Stage("quadratic", "Quadratic",
                  "The quadratic form: A = φ(Q)φ(K)ᵀ with a 0 wherever a key comes after its query, each row divided"
                  " by its sum, times V. It is attention with φ(q)·φ(k) for e^(q·k/√dₖ): the n × n matrix is all there.")
    per_head = True
    matrices = ("lin_A", "lin_W", "lin_out")
    styles = MappingProxyType({"lin_A": PaneStyle(masked=True), "lin_W": PaneStyle(heat=True, masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        lin = trace.comp.scenario.linear
        assert lin is not None
        if not lin.normalize:
            return self.stage.meaning.replace(", each row divided by its sum,", " (normalize = false: no row is divided),")
        return self.stage.meaning

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc = trace.comp.scenario
        plans = [Plan("lin_A", sc.n, sc.m)]
        if _normalised(trace):
            plans.append(Plan("lin_W", sc.n, sc.m))
        return [*plans, Plan("lin_out", sc.n, trace.comp.heads[head].d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        h, hr, lin = _linear_at(trace, seg.head)
        sc = trace.comp.scenario
        q = sc.labels[row]
        _, _, qs, ks = scored(trace)
        if seg.target == "lin_A":
            k = sc.key_labels[col]
            value = float(lin.masked[row, col])
            if not sc.allow[row, col]:
                return Operation(index, seg, row, col, value, (), f"A[{q},{k}] = 0 (masked: {k} comes after {q})")
            work = dot_line(lin.phi_Q[row], lin.phi_K[col], False, False, fmt(value, False, d), d, trace.hand)
            text = f"A[{q},{k}] = φ({qs})[{q}]·φ({ks})[{k}] = {work}"
            return Operation(index, seg, row, col, value, (Ref("phi_Q", h, row), Ref("phi_K", h, col)), text)
        if seg.target == "lin_W":
            k = sc.key_labels[col]
            value = float(lin.weights[row, col])
            allowed = [j for j in range(sc.m) if sc.allow[row, j]]
            terms, total = fit(lambda *ts: sum(ts), [float(lin.masked[row, j]) for j in allowed],
                               float(lin.row_sum[row]), d, plain_sum=True)
            (a, s), res = fit(lambda x, y: x / y, [float(lin.masked[row, col]), float(lin.row_sum[row])], value, d)
            text = f"W[{q},{k}] = A[{q},{k}] / Σ A[{q}] = {a} / {s} = {res}"
            # a long row's sum is the pane's to show: a line of hundreds of terms is no step
            details = (f"Σ A[{q}] = {' + '.join(terms)} = {total}",) if 1 < len(terms) <= MAX_TERMS else ()
            return Operation(index, seg, row, col, value, (Ref("lin_A", h, row),), text, details)
        value = float(lin.output[row, col])
        w = "W" if _normalised(trace) else "A"
        weights = lin.weights[row]
        work = dot_line(weights, hr.V[:, col], False, trace.integral("V", h), fmt(value, False, d), d, trace.hand)
        text = f"out[{q},{col}] = {w}[{q}]·V[:,{col}] = {work}"
        return Operation(index, seg, row, col, value, (Ref("lin_W" if w == "W" else "lin_A", h, row),
                                                       Ref("V", h, None, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        lin = _linear_matrices(trace, head, name)
        return {"lin_A": lin.masked, "lin_W": lin.weights, "lin_out": lin.output}[name]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        if target == "lin_A":
            return [("phi_Q", h), ("phi_K", h), ("lin_A", h)]
        if target == "lin_W":
            return [("lin_A", h), ("lin_W", h)]
        return [("lin_W" if _normalised(trace) else "lin_A", h), ("V", h), ("lin_out", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("lin_W" if _normalised(trace) else "lin_A", head), ("lin_out", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        _, _, qs, ks = scored(trace)
        return {"lin_A": f"A = φ({qs})φ({ks})ᵀ, masked", "lin_W": "W = A ÷ row sum",
                "lin_out": "out = W·V" if _normalised(trace) else "out = A·V"}[name]

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        if _normalised(trace):
            return [FormulaPart(OPEN, "rownorm("), FormulaPart(CLOSE, ")"), FormulaPart(V_DOT, "·"), FormulaPart(V_SLOT, "V")]
        return [FormulaPart(V_DOT, "·"), FormulaPart(V_SLOT, "V")]

    def lights(self, seg: Segment) -> frozenset[int]:
        if seg.target == "lin_A":
            return frozenset({Q_SLOT, QK_DOT, K_SLOT})
        if seg.target == "lin_W":
            return frozenset({OPEN, CLOSE})
        return frozenset({V_DOT, V_SLOT})

    worksheet_tables = _quadratic_tables
    worksheet_line = _quadratic_line


class Recurrent(StageSpec):
    stage = Stage("recurrent", "Recurrent",
                  "The same outputs from a running state, token after token: S_t = S_{t−1} + φ(k_t)v_tᵀ (dₖ × d_v)"
                  " and z_t = z_{t−1} + φ(k_t), then o_t = φ(q_t)ᵀS_t / φ(q_t)ᵀz_t. The state's size does not grow"
                  " with the tokens, where softmax decoding keeps a KV cache that grows by dₖ + d_v numbers a token"
                  " and is read whole at every step.")
    per_head = True
    matrices = ("lin_S", "lin_z", "lin_o")

    def runs(self, trace: TraceContext) -> bool:
        return _on(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("lin_S", sc.n, hr.d_k * hr.d_v)]
        if _normalised(trace):
            plans.append(Plan("lin_z", sc.n, hr.d_k))
        return [*plans, Plan("lin_o", sc.n, hr.d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        h, hr, lin = _linear_at(trace, seg.head)
        sc = trace.comp.scenario
        t = sc.labels[row]
        before = sc.labels[row - 1] if row else ""
        _, _, qs, ks = scored(trace)
        if seg.target == "lin_S":
            i, j = divmod(col, hr.d_v)
            value = float(lin.S[row, i, j])
            phi, v = float(lin.phi_K[row, i]), float(hr.V[row, j])
            cell = f"S_{t}[{i},{j}]"
            if row == 0:
                (a, b), res = fit(lambda x, y: x * y, [phi, v], value, d)
                text = f"{cell} = φ({ks})[{t},{i}]·V[{t},{j}] = {a}·{b} = {res}"
            else:
                prev = float(lin.S[row - 1, i, j])
                (p, a, b), res = fit(lambda x, y, z: x + y * z, [prev, phi, v], value, d)
                text = f"{cell} = S_{before}[{i},{j}] + φ({ks})[{t},{i}]·V[{t},{j}] = {p} + {a}·{b} = {res}"
            refs = (Ref("phi_K", h, row, i), Ref("V", h, row, j), *((Ref("lin_S", h, row - 1, col),) if row else ()))
            return Operation(index, seg, row, col, value, refs, text)
        if seg.target == "lin_z":
            value = float(lin.z[row, col])
            phi = float(lin.phi_K[row, col])
            if row == 0:
                text = f"z_{t}[{col}] = φ({ks})[{t},{col}] = {fmt(value, False, d)}"
            else:
                (p, a), res = fit(lambda x, y: x + y, [float(lin.z[row - 1, col]), phi], value, d, plain_sum=True)
                text = f"z_{t}[{col}] = z_{before}[{col}] + φ({ks})[{t},{col}] = {p} + {a} = {res}"
            refs = (Ref("phi_K", h, row, col), *((Ref("lin_z", h, row - 1, col),) if row else ()))
            return Operation(index, seg, row, col, value, refs, text)
        value = float(lin.recurrent[row, col])
        num = dot_line(lin.phi_Q[row], lin.S[row][:, col], False, False, fmt(float(lin.numer[row, col]), False, d), d,
                       trace.hand)
        details = [f"φ({qs})[{t}]·S_{t}[:,{col}] = {num}"]
        if _normalised(trace):
            den = dot_line(lin.phi_Q[row], lin.z[row], False, False, fmt(float(lin.denom[row]), False, d), d, trace.hand)
            details.append(f"φ({qs})[{t}]·z_{t} = {den}")
            (a, b), res = fit(lambda x, y: x / y, [float(lin.numer[row, col]), float(lin.denom[row])], value, d)
            text = f"o[{t},{col}] = φ({qs})[{t}]·S_{t}[:,{col}] / φ({qs})[{t}]·z_{t} = {a} / {b} = {res}"
        else:
            text = f"o[{t},{col}] = φ({qs})[{t}]·S_{t}[:,{col}] = {num}"
            details = []
        if col == hr.d_v - 1:
            details += agree_lines(trace, hr, row, d)
        refs = (Ref("phi_Q", h, row), Ref("lin_S", h, row), *((Ref("lin_z", h, row),) if _normalised(trace) else ()))
        return Operation(index, seg, row, col, value, refs, text, tuple(details))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        lin = _linear_matrices(trace, head, name)
        if name == "lin_S":
            flat = lin.S.reshape(lin.S.shape[0], -1)  # (n, d_k·d_v) row t: S_t read row by row
            flat.setflags(write=False)
            return flat
        return lin.z if name == "lin_z" else lin.recurrent

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        if target == "lin_S":
            return [("phi_K", h), ("V", h), ("lin_S", h)]
        if target == "lin_z":
            return [("phi_K", h), ("lin_z", h)]
        # φ(Q) stays in the overview: four panes do not fit 80 columns
        return [("lin_S", h), *((("lin_z", h),) if _normalised(trace) else ()), ("lin_o", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("lin_S", head), ("lin_o", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "lin_S":
            return "S_t, the state after t"
        if name == "lin_z":
            return "z_t = Σ φ(k)"
        return "o_t = φ(q)ᵀS / φ(q)ᵀz" if _normalised(trace) else "o_t = φ(q)ᵀS"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return []

    worksheet_tables = _recurrent_tables
    worksheet_line = _recurrent_line


def agree_lines(trace: TraceContext, hr: HeadResult, row: int, d: int) -> list[str]:
    """Under a row's last output: the two forms agree, and what each keeps in memory."""
    lin = hr.part(LinearForward)
    assert lin is not None
    sc = trace.comp.scenario
    t = sc.labels[row]
    rec, quad = lin.recurrent[row], lin.output[row]
    same = bool(np.allclose(rec, quad, rtol=1e-9, atol=1e-12))
    mark = "✓" if same else "≈"
    how = "the same numbers" if same else "apart only by the rounding each form does on its own"
    lines = [f"{mark} o[{t}] {vector(rec, False, d)} is the quadratic form's out[{t}] {vector(quad, False, d)}: {how}"]
    if row == sc.n - 1:
        n, d_k, d_v = sc.n, hr.d_k, hr.d_v
        lines.append(memory_line(n, d_k, d_v, lin.spec.normalize))
    return lines


def memory_line(n: int, d_k: int, d_v: int, normalize: bool) -> str:
    """What decoding keeps, per head: softmax attention's KV cache against the state. The n × n matrix is not
    what decoding keeps: it is the cost of working all n tokens at once (and FlashAttention never stores it)."""
    kept = d_k * d_v + (d_k if normalize else 0)
    state = f"dₖ × d_v{' + dₖ' if normalize else ''} = {d_k}·{d_v}{f' + {d_k}' if normalize else ''} = {kept}"
    return (f"memory while decoding: softmax attention keeps a KV cache of n·(dₖ + d_v) = {n}·({d_k} + {d_v})"
            f" = {n * (d_k + d_v)} numbers, {d_k + d_v} more with every token, and reads all of them at each step;"
            f" the state holds {state} numbers however many tokens come (the n × n matrix, {n}² = {n * n} here, is"
            " the cost of working all n tokens at once, O(n²) in time; FlashAttention never stores it)")


FEATURE = Feature()
QUADRATIC = Quadratic()
RECURRENT = Recurrent()


@counts(FEATURE)
def _feature_cost(sc: Scenario, ph: Phase) -> Count:
    """φ of each query and key cell: elu + 1 takes an exponential a cell (a dense kernel evaluates it for every
    cell, then keeps x + 1 where x > 0); relu and the identity only compare or copy."""
    from qkv_tui.core.cost import B, Count, fig, shapes, term

    s = shapes(sc)
    q, k = (ph.R, ("Σd_k", s.sum_dk)), (ph.NEW, ("Σd_k", s.sum_dk))
    assert sc.linear is not None
    other = fig(term("exp q", *q), term("exp k", *k)) if sc.linear.feature == "elu1" else fig()
    return Count(FEATURE.stage.key, FEATURE.stage.name, ph.name, other=other,
                 read=fig(term("Q", *q, B(ph)), term("K", *k, B(ph))),
                 written=fig(term("φ(Q)", *q, B(ph)), term("φ(K)", *k, B(ph))))


@counts(QUADRATIC)
def _quadratic_cost(sc: Scenario, ph: Phase) -> Count:
    """A = φ(Q)φ(K)ᵀ, every cell (the causal zeros too), divided by its row's sum where normalised, times V."""
    from qkv_tui.core.cost import B, Count, fig, per_heads, shapes, term

    s = shapes(sc)
    two, h = ("2", 2), ("h", s.h)
    matmul = per_heads("A", s.h, "h", tuple(dk for dk, _ in s.heads), "d_k", two, ph.R, ph.K)
    matmul += per_heads("AV", s.h, "h", tuple(dv for _, dv in s.heads), "d_v", two, ph.R, ph.K)
    normalised = _normalised_sc(sc)
    cells = (h, ph.R, ph.K)
    written = fig(term("A", *cells, B(ph)))
    written += fig(term("W", *cells, B(ph))) if normalised else fig()
    return Count(QUADRATIC.stage.key, QUADRATIC.stage.name, ph.name, matmul=matmul,
                 other=fig(term("div", *cells)) if normalised else fig(),
                 read=fig(term("φ(Q)", ph.R, ("Σd_k", s.sum_dk), B(ph)), term("φ(K)", ph.K, ("Σd_k", s.sum_dk), B(ph)),
                          term("V", ph.K, ("Σd_v", s.sum_dv), B(ph))),
                 written=written + fig(term("out", ph.R, ("Σd_v", s.sum_dv), B(ph))))


@counts(RECURRENT)
def _recurrent_cost(sc: Scenario, ph: Phase) -> Count:
    """Per token and head S += φ(k)vᵀ (2·d_k·d_v) and o = φ(q)ᵀS (2·d_k·d_v), with φ(q)ᵀz (2·d_k) and a division
    per output cell where normalised. Nothing grows with the context: at decode it reads the d_k × d_v state."""
    from qkv_tui.core.cost import DECODE, B, Count, fig, shapes, term

    s = shapes(sc)
    two = ("2", 2)
    kv = ("Σd_k·d_v", sum(dk * dv for dk, dv in s.heads))
    dk, dv = ("Σd_k", s.sum_dk), ("Σd_v", s.sum_dv)
    normalised = _normalised_sc(sc)
    matmul = fig(term("S += φ(k)vᵀ", two, ph.R, kv), term("φ(q)ᵀS", two, ph.R, kv))
    matmul += fig(term("φ(q)ᵀz", two, ph.R, dk)) if normalised else fig()
    read = fig(term("φ(Q)", ph.R, dk, B(ph)), term("φ(K)", ph.R, dk, B(ph)), term("V", ph.R, dv, B(ph)))
    if ph.name == DECODE:  # the state carried from the tokens before
        read += fig(term("S", kv, B(ph))) + (fig(term("z", dk, B(ph))) if normalised else fig())
    written = fig(term("S", ph.R, kv, B(ph))) + (fig(term("z", ph.R, dk, B(ph))) if normalised else fig())
    return Count(RECURRENT.stage.key, RECURRENT.stage.name, ph.name, matmul=matmul,
                 other=fig(term("div", ph.R, dv)) if normalised else fig(), read=read,
                 written=written + fig(term("o", ph.R, dv, B(ph))))



# --- the backward pass (docs/backward.md, "[linear]"): the quadratic form read backwards ---------------------


class LinearBackStage(BackwardSpec):
    """The quadratic form read backwards: out = W·V with W = A ÷ rowsum(A), A = φ(Q)φ(K)ᵀ masked."""

    stage = Stage("dlinear", "dLinear",
                  "Back through linear attention, along its quadratic form: out = W·V, so dV = Wᵀ·dO and"
                  " dW = dO·Vᵀ, as for a softmax. Each row of W was A divided by the row's sum, and every A of the row"
                  " fed that sum, so dA = (dW − D) / ΣA with D = dO·out, the same D the softmax subtracts. Then"
                  " A = φ(Q)φ(K)ᵀ gives dφ(Q) = dA·φ(K) and dφ(K) = dAᵀ·φ(Q), and φ's slope takes them to Q and K."
                  " A key the mask hides got no A, so it gets no gradient.")
    per_head = True
    matrices = ("lb_dV", "lb_dW", "lb_D", "lb_dA", "lb_dphiQ", "lb_dphiK", "lb_dQ", "lb_dK")
    styles = MappingProxyType({"lb_dA": PaneStyle(masked=True)})

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and _on(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        lin = trace.comp.scenario.linear
        assert lin is not None
        text = self.stage.meaning
        if not lin.normalize:
            text = text.replace("Each row of W was A divided by the row's sum, and every A of the row fed that sum,"
                                " so dA = (dW − D) / ΣA with D = dO·out, the same D the softmax subtracts.",
                                "With normalize = false no row was divided: dA is dW itself where the mask allows.")
            text = text.replace("out = W·V, so dV = Wᵀ·dO and dW = dO·Vᵀ", "out = A·V, so dV = Aᵀ·dO and dW = dO·Vᵀ")
        phi_prime = {"elu1": " φ'(x) = 1 above 0 and eˣ at or below (elu + 1).", "relu": " φ'(x) = 1 above 0, else 0 (relu).",
                 "identity": " φ'(x) = 1 (φ is the identity)."}[lin.feature]
        return text + phi_prime

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("lb_dV", sc.n, hr.d_v), Plan("lb_dW", sc.n, sc.n)]
        if _normalised(trace):
            plans.append(Plan("lb_D", sc.n, 1))
        return [*plans, Plan("lb_dA", sc.n, sc.n), Plan("lb_dphiQ", sc.n, hr.d_k), Plan("lb_dphiK", sc.n, hr.d_k),
                Plan("lb_dQ", sc.n, hr.d_k), Plan("lb_dK", sc.n, hr.d_k)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hg, hr, sc = grads(trace).heads[h], _lin(trace, h), trace.comp.scenario
        lb, lin = _back(hg), hr.part(LinearForward)
        assert lb is not None and lin is not None
        w = "W" if _normalised(trace) else "A"
        _, _, qs, ks = scored(trace)
        target, q = seg.target, sc.labels[row]
        if target == "lb_dV":
            return dot_cell(trace, index, seg, row, col, d, float(lb.dV[row, col]), lin.weights[:, row],
                            hg.dO[:, col], False, False, f"dV[{q},{col}] = {w}[:,{q}]·dO[:,{col}]",
                            (Ref("lin_W" if w == "W" else "lin_A", h, None, row), Ref("dO_h", h, None, col)))
        if target == "lb_dW":
            k = sc.labels[col]
            return dot_cell(trace, index, seg, row, col, d, float(lb.dweights[row, col]), hg.dO[row], hr.V[col],
                            False, trace.integral("V", h), f"d{w}[{q},{k}] = dO[{q}]·V[{k}]",
                            (Ref("dO_h", h, row), Ref("V", h, col)))
        if target == "lb_D":
            return dot_cell(trace, index, seg, row, col, d, float(lb.D[row]), hg.dO[row], lin.output[row], False, False,
                            f"D[{q}] = dO[{q}]·out[{q}]", (Ref("dO_h", h, row), Ref("lin_out", h, row)))
        if target == "lb_dA":
            k = sc.labels[col]
            value = float(lb.dA[row, col])
            refs = (Ref("lb_dW", h, row, col),)
            if not sc.allow[row, col]:
                return Operation(index, seg, row, col, value, refs,
                                 f"dA[{q},{k}] = 0 (masked: {k} comes after {q}, so A[{q},{k}] fed nothing)")
            if not _normalised(trace):
                return Operation(index, seg, row, col, value, refs,
                                 f"dA[{q},{k}] = dW[{q},{k}] = {trace.formatted('lb_dA', h, value, d)}")
            return formula_cell(trace, index, seg, row, col, d, value, lambda x, y, s: (x - y) / s,
                                [float(lb.dweights[row, col]), float(lb.D[row]), float(lin.row_sum[row])],
                                lambda t: f"({t[0]} − {t[1]}) / {t[2]}",
                                f"dA[{q},{k}] = (dW[{q},{k}] − D[{q}]) / Σ A[{q}]",
                                (*refs, Ref("lb_D", h, row), Ref("lin_A", h, row)))
        if target in ("lb_dphiQ", "lb_dphiK"):
            if target == "lb_dphiQ":
                return dot_cell(trace, index, seg, row, col, d, float(lb.dphi_Q[row, col]), lb.dA[row],
                                lin.phi_K[:, col], False, False, f"dφ({qs})[{q},{col}] = dA[{q}]·φ({ks})[:,{col}]",
                                (Ref("lb_dA", h, row), Ref("phi_K", h, None, col)))
            return dot_cell(trace, index, seg, row, col, d, float(lb.dphi_K[row, col]), lb.dA[:, row],
                            lin.phi_Q[:, col], False, False, f"dφ({ks})[{q},{col}] = dA[:,{q}]·φ({qs})[:,{col}]",
                            (Ref("lb_dA", h, None, row), Ref("phi_Q", h, None, col)))
        return self._through_phi(trace, index, seg, row, col, d)

    def _through_phi(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int) -> Operation:
        """dQ = dφ(Q) ⊙ φ'(Q), one cell: the slope is 1, eˣ or 0, read off the cell φ was applied to."""
        h = seg.head
        assert h is not None
        hg, hr, sc = grads(trace).heads[h], _lin(trace, h), trace.comp.scenario
        lb = _back(hg)
        assert lb is not None and sc.linear is not None
        _, _, qs, ks = scored(trace)
        is_q = seg.target == "lb_dQ"
        name = qs if is_q else ks
        x = float((hr.Q_used if is_q else hr.K_used)[row, col])
        dphi = float((lb.dphi_Q if is_q else lb.dphi_K)[row, col])
        value = float((lb.dQ_used if is_q else lb.dK_used)[row, col])
        cell, label = f"d{name}[{sc.labels[row]},{col}]", sc.labels[row]
        refs = (Ref("lb_dphiQ" if is_q else "lb_dphiK", h, row, col),)
        said = f"{cell} = dφ({name})[{label},{col}]·φ'({name}[{label},{col}])"
        kind = sc.linear.feature
        if kind == "elu1" and x <= 0 and trace.hand is not None:
            # by hand the slope eˣ is written down rounded before it multiplies: the line shows it, so it re-computes
            phi_prime = float((lb.slope_Q if is_q else lb.slope_K)[row, col])
            shown_x = fmt(x, False, d)
            shown_x = f"({shown_x})" if shown_x.startswith("-") else shown_x
            return formula_cell(trace, index, seg, row, col, d, value, lambda g, s: g * s, [dphi, phi_prime],
                                lambda t: f"{t[0]}·e^{shown_x} = {t[0]}·{t[1]}", said, refs)
        if kind == "elu1" and x <= 0:
            return formula_cell(trace, index, seg, row, col, d, value, lambda g, v: g * math.exp(v), [dphi, x],
                                lambda t: f"{t[0]}·e^{t[1]}", said, refs)
        if kind == "relu" and x <= 0:
            return Operation(index, seg, row, col, value, refs,
                             f"{said} = 0 ({name}[{label},{col}] ≤ 0: relu is flat there, so nothing passes)")
        shown = trace.formatted(seg.target, h, value, d)
        why = "" if kind == "identity" else f" ({name}[{label},{col}] > 0: slope 1)"
        return Operation(index, seg, row, col, value, refs, f"{said} = {shown}{why}")

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        lb = _back(grads(trace).heads[head])
        if lb is None:
            raise KeyError(name)
        return {"lb_dV": lb.dV, "lb_dW": lb.dweights, "lb_D": lb.D[:, None], "lb_dA": lb.dA, "lb_dphiQ": lb.dphi_Q,
                "lb_dphiK": lb.dphi_K, "lb_dQ": lb.dQ_used, "lb_dK": lb.dK_used}[name]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h, target = op.head, op.segment.target
        w = "lin_W" if _normalised(trace) else "lin_A"
        qn, kn, _, _ = scored(trace)
        return {"lb_dV": [(w, h), ("dO_h", h), ("lb_dV", h)], "lb_dW": [("dO_h", h), ("V", h), ("lb_dW", h)],
                "lb_D": [("dO_h", h), ("lin_out", h), ("lb_D", h)], "lb_dA": [("lb_dW", h), ("lb_D", h), ("lb_dA", h)],
                "lb_dphiQ": [("lb_dA", h), ("phi_K", h), ("lb_dphiQ", h)],
                "lb_dphiK": [("lb_dA", h), ("phi_Q", h), ("lb_dphiK", h)],
                "lb_dQ": [(qn, h), ("lb_dphiQ", h), ("lb_dQ", h)],
                "lb_dK": [(kn, h), ("lb_dphiK", h), ("lb_dK", h)]}[target]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("lb_dA", head), ("lb_dQ", head), ("lb_dK", head)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        _, _, qs, ks = scored(trace)
        w = "W" if _normalised(trace) else "A"
        return {"lb_dV": f"dV = {w}ᵀ·dO", "lb_dW": f"d{w} = dO·Vᵀ", "lb_D": "D = rowsum(dO⊙out)",
                "lb_dA": "dA = (dW − D) ÷ ΣA" if w == "W" else "dA = dW, masked",
                "lb_dphiQ": f"dφ({qs}) = dA·φ({ks})", "lb_dphiK": f"dφ({ks}) = dAᵀ·φ({qs})",
                "lb_dQ": f"d{qs} = dφ ⊙ φ'", "lb_dK": f"d{ks} = dφ ⊙ φ'"}[name]


BACKWARD = LinearBackStage()
