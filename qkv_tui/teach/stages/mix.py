"""Stage Mix: each token's output, the weights times the Value rows."""

from __future__ import annotations

from functools import lru_cache, partial
from typing import TYPE_CHECKING

from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.attention import project
from qkv_tui.teach.arith import dot_line, dot_places, vector_mix
from qkv_tui.teach.stages.common import (
    V_DOT,
    V_SLOT,
    FormulaPart,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, has_backward
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.replaced import softmax_runs

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


VECTOR_WIDTH = 8  # the Mix stage's vector form is shown for Value rows up to this wide


class Mix(StageSpec):
    stage = Stage("mix", "Mix",
                  "Blend the Value rows with the weights: each token's output is a weighted sum of the Values it"
                  " may attend. That is how attention moves information across the sequence.")
    per_head = True
    matrices = ("output",)

    def runs(self, trace: TraceContext) -> bool:
        return softmax_runs(trace)  # [linear] and [deltanet] replace it

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        return [Plan("output", trace.comp.scenario.n, trace.comp.heads[head].d_v)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        head = trace.comp.heads[h]
        q = trace.comp.scenario.labels[row]
        value = float(head.output[row, col])
        v_int = trace.integral("V", h)
        places = _row_places(trace, h, row, d)
        result = trace.formatted("output", h, value, d)
        work = dot_line(head.weights[row], head.V[:, col], False, v_int, result, d, trace.hand, places)
        text = f"out[{q},{col}] = weights[{q}]·V[:,{col}] = {work}"
        details: tuple[str, ...] = ()
        if head.d_v <= VECTOR_WIDTH and col == head.d_v - 1:  # the row's vector, once all of it is computed
            results = [trace.formatted("output", h, v, d) for v in head.output[row]]
            form = vector_mix(head.weights[row], head.V, v_int, results, places, trace.hand)
            if form:
                details = (f"out[{q}] = {form}",)
        return Operation(index, seg, row, col, value, (Ref("weights", h, row), Ref("V", h, None, col)), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return trace.comp.heads[head].output

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("weights", op.head), ("V", op.head), ("output", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("output", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "out = weights·V"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(V_DOT, "·"), FormulaPart(V_SLOT, "V")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({V_DOT, V_SLOT})

    def markdown_details(self, op: Operation) -> tuple[str, ...]:
        return op.details if op.col == op.segment.cols - 1 else ()  # the vector form closes the row it sums up

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        sc = chain.sc
        # (n, d_v) from the printed weights and V
        output = project(chain.values(f"weights.{head}"), chain.values(f"V.{chain.owners[head]}"), None, chain.page)
        return [Table(f"output.{head}", "output", "output = weights·V", "mix", head, output, sc.labels,
                      idx(sc.heads[head].d_v), False, True)]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        h = table.head
        assert h is not None
        q = cells.sc.labels[row]
        return (f"output[{q},{col}] = weights[{q}]·V[:,{col}]"
                f" = {cells.dot(f'weights.{h}', row, f'V.{cells.owners[h]}', col)} = {answer}")


SPEC = Mix()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """weights·V for every head; each K/V head's V read once."""
    from qkv_tui.core.cost import B, Count, fig, per_heads, shapes, term

    s = shapes(sc)
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 matmul=per_heads("AV", s.h, "h", tuple(dv for _, dv in s.heads), "d_v", ("2", 2), ph.R, ph.A),
                 read=fig(term("weights", ("h", s.h), ph.R, ph.A, B(ph)), term("V", ph.SEEN, ("Σ_kv d_v", s.kv_dv), B(ph))),
                 written=fig(term("out", ph.R, ("Σd_v", s.sum_dv), B(ph))))


def _row_places(trace: TraceContext, head: int, row: int, decimals: int) -> int:
    """One precision per output row, so a row's lines show its numbers alike (worked out once per row)."""
    places = trace.memo("mix places", lambda: lru_cache(maxsize=64)(partial(_places, trace)))
    return places(head, row, decimals)


def _places(trace: TraceContext, head: int, row: int, decimals: int) -> int:
    hr = trace.comp.heads[head]
    results = [trace.formatted("output", head, v, decimals) for v in hr.output[row]]
    rows = [(hr.weights[row], hr.V[:, j], results[j]) for j in range(hr.d_v)]
    return dot_places(rows, False, trace.integral("V", head), decimals, trace.hand)


class MixBack(BackwardSpec):
    """Mix read backwards: out = weights·V, so dV = weightsᵀ·dO and dweights (dP) = dO·Vᵀ."""

    stage = Stage("dmix", "dMix",
                  "Back through Mix. out[t] was Σⱼ weights[t,j]·V[j], so V[j] reached every output row t with weight"
                  " weights[t,j]: dV = weightsᵀ·dO adds up what each row asks of V[j]. And a change in one weight"
                  " moved out[t] by V[j], so dP = dO·Vᵀ: how fast the loss would rise if token t gave key j more"
                  " weight (it falls where dP < 0). dP is worked for every cell, masked ones too; the softmax decides"
                  " what reaches the scores.")
    per_head = True
    matrices = ("dO_h", "dV", "dP")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and softmax_runs(trace)  # [linear] and [deltanet] have their own

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        return [Plan("dV", sc.m, hr.d_v), Plan("dP", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hg, hr, sc = grads(trace).heads[h], trace.comp.heads[h], trace.comp.scenario
        if seg.target == "dV":
            k = sc.key_labels[row]
            return dot_cell(trace, index, seg, row, col, d, float(hg.dV[row, col]), hr.weights[:, row], hg.dO[:, col],
                            False, False, f"dV[{k},{col}] = weights[:,{k}]·dO[:,{col}]",
                            (Ref("weights", h, None, row), Ref("dO_h", h, None, col)))
        q, k = sc.labels[row], sc.key_labels[col]
        return dot_cell(trace, index, seg, row, col, d, float(hg.attend.dP[row, col]), hg.dO[row], hr.V[col],
                        False, trace.integral("V", h), f"dP[{q},{k}] = dO[{q}]·V[{k}]",
                        (Ref("dO_h", h, row), Ref("V", h, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        hg = grads(trace).heads[head]
        return {"dO_h": hg.dO, "dV": hg.dV, "dP": hg.attend.dP}[name]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if op.segment.target == "dV":
            return [("weights", h), ("dO_h", h), ("dV", h)]
        return [("dO_h", h), ("V", h), ("dP", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dV", head), ("dP", head)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"dO_h": "dO (this head's out)", "dV": "dV = weightsᵀ·dO", "dP": "dP = dO·Vᵀ"}[name]


BACKWARD = MixBack()
