"""Stage W_O (where the scenario has one): the concatenated heads mixed into the model's output width."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from qkv_tui.core.engine import Computation
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import dot_line
from qkv_tui.teach.stages.common import (
    W_O_SLOT,
    FormulaPart,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    counts,
    dot_bias_line,
)
from qkv_tui.teach.stages.concat import joined_name, printed_concat
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, has_backward, sum_cell
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


class WO(StageSpec):
    stage = Stage("wo", "W_O",
                  "A final linear layer W_O mixes the heads' concatenated outputs into the model's output width.")
    matrices = ("W_O", "final")

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.W_O is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("final", trace.comp.scenario.n, trace.comp.output.shape[1])]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        comp = trace.comp
        assert comp.W_O is not None and col is not None
        q = comp.scenario.labels[row]
        value = float(comp.output[row, col])
        result = trace.formatted("final", None, value, d)
        if comp.b_O is None:
            work = dot_line(comp.concat[row], comp.W_O[:, col], trace.integral("concat", None),
                            trace.integral("W_O", None), result, d, trace.hand)
            text = f"final[{q},{col}] = concat[{q}]·W_O[:,{col}] = {work}"
        else:
            work = dot_bias_line(comp.concat[row], comp.W_O[:, col], float(comp.b_O[col]),
                                 trace.integral("concat", None), trace.integral("W_O", None), result, d, trace.hand)
            text = f"final[{q},{col}] = concat[{q}]·W_O[:,{col}] + b_O[{col}] = {work}"
        return Operation(index, seg, row, col, value, (Ref("concat", None, row), Ref("W_O", None, None, col)), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if name == "final":
            return trace.comp.output
        if trace.comp.W_O is None:
            raise KeyError(name)
        return trace.comp.W_O

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("concat", None), ("W_O", None), ("final", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("final", None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if name == "W_O":
            return "W_O"
        return "final = concat·W_O" + (" + b_O" if trace.comp.b_O is not None else "")

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(W_O_SLOT, "·W_O")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({W_O_SLOT})

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("W_O", None), "", page.table("final", None), "", *page.worked(self.stage.key, None)]

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        sc = chain.sc
        assert sc.W_O is not None
        width = idx(sc.W_O.shape[1])
        out = [Table("W_O", "W_O", "W_O", "wo", None, sc.W_O, idx(sc.W_O.shape[0]), width, True, False)]
        if sc.b_O is not None:
            out.append(Table("b_O", "b_O", "b_O", "wo", None, sc.b_O[None, :], ("b",), width, True, False))
        source = "concat" if len(sc.heads) > 1 else _one_head(chain.comp, chain.printed)[1]
        final = printed_concat(chain) @ sc.W_O + (sc.b_O[None, :] if sc.b_O is not None else 0.0)
        out.append(Table("final", "final", f"final = {source}·W_O" + (" + b_O" if sc.b_O is not None else ""), "wo", None,
                         chain.rounded(final), sc.labels, width, False, True))
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        q = cells.sc.labels[row]
        # with one head, its output (or what a part made of it) is what W_O multiplies: no concat table on the page
        source, label = ("concat", "concat") if "concat" in cells.tables else _one_head(cells.comp, cells.tables)
        plus = f" + b_O[{col}]" if "b_O" in cells.tables else ""
        return (f"final[{q},{col}] = {label}[{q}]·W_O[:,{col}]{plus} = {cells.dot(source, row, 'W_O', col)}"
                f"{cells.bias('b_O', col)} = {answer}")


SPEC = WO()


def _one_head(comp: Computation, printed: Mapping[str, object]) -> tuple[str, str]:
    """(its table's key, its name) of what Concat would join of a lone head, where the page prints it (the gated
    output, printed after Mix), else of the head's output."""
    name = joined_name(comp.heads[0])
    return (f"{name}.0", name) if f"{name}.0" in printed else ("output.0", "output")


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """concat·W_O: the heads mixed into the model's width."""
    from qkv_tui.core.cost import B, Count, fig, term

    assert sc.W_O is not None
    dv, dout = ("Σd_v", int(sc.W_O.shape[0])), ("d_out", int(sc.W_O.shape[1]))
    bias = fig(term("b_O", dout, B(ph))) if sc.b_O is not None else fig()
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, matmul=fig(term("·W_O", ("2", 2), ph.R, dv, dout)),
                 read=fig(term("concat", ph.R, dv, B(ph)), term("W_O", dv, dout, B(ph))) + bias,
                 written=fig(term("final", ph.R, dout, B(ph))))


class WOBack(BackwardSpec):
    """W_O read backwards: concat·W_O gave the output, so dO reaches the heads through W_Oᵀ and W_O's own
    gradient is concatᵀ·dO."""

    stage = Stage("dwo", "dW_O",
                  "Back through W_O. Each output cell was concat[t]·W_O[:,j], so a change in concat[t,c] moved every"
                  " output cell of token t by W_O[c,j]: d_concat = dO·W_Oᵀ collects those. And W_O[c,j] met concat[t,c]"
                  " in every token's row, so its gradient dW_O = concatᵀ·dO adds them up over the tokens.")
    matrices = ("d_concat", "dW_O", "db_O")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and trace.comp.W_O is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        comp = trace.comp
        assert comp.W_O is not None
        plans = [Plan("d_concat", comp.scenario.n, comp.concat.shape[1]), Plan("dW_O", *comp.W_O.shape)]
        return plans + ([Plan("db_O", 1, comp.W_O.shape[1])] if comp.b_O is not None else [])

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        comp = trace.comp
        g = grads(trace)
        assert comp.W_O is not None and col is not None
        labels = comp.scenario.labels
        if seg.target == "d_concat":
            q = labels[row]
            return dot_cell(trace, index, seg, row, col, d, float(g.d_concat[row, col]), g.dO[row], comp.W_O[col],
                            False, trace.integral("W_O", None), f"d_concat[{q},{col}] = dO[{q}]·W_O[{col},:]",
                            (Ref("dO", None, row), Ref("W_O", None, col)))
        if seg.target == "dW_O":
            assert g.dW_O is not None
            return dot_cell(trace, index, seg, row, col, d, float(g.dW_O[row, col]), comp.concat[:, row], g.dO[:, col],
                            trace.integral("concat", None), False, f"dW_O[{row},{col}] = concat[:,{row}]·dO[:,{col}]",
                            (Ref("concat", None, None, row), Ref("dO", None, None, col)))
        assert g.db_O is not None
        return sum_cell(trace, index, seg, row, col, d, float(g.db_O[col]), g.dO[:, col], f"db_O[{col}] = Σ dO[:,{col}]",
                        (Ref("dO", None, None, col),))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not has_backward(trace):
            raise KeyError(name)
        g = grads(trace)
        if name == "d_concat":
            return g.d_concat
        if name == "dW_O" and g.dW_O is not None:
            return g.dW_O
        if name == "db_O" and g.db_O is not None:
            return g.db_O[None, :]
        raise KeyError(name)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        if op.segment.target == "d_concat":
            return [("dO", None), ("W_O", None), ("d_concat", None)]
        if op.segment.target == "dW_O":
            return [("concat", None), ("dO", None), ("W_O", None), ("dW_O", None)]
        return [("dO", None), ("db_O", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("d_concat", None)] if self.runs(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"d_concat": "d_concat = dO·W_Oᵀ", "dW_O": "dW_O = concatᵀ·dO", "db_O": "db_O = Σ dO"}[name]


BACKWARD = WOBack()
