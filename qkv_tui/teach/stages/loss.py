"""Stage Loss (with a [backward] target): how far the final output is from the target, and dO, the
gradient every backward stage starts from (docs/backward.md)."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.gate import Gated
from qkv_tui.teach.arith import MAX_TERMS, fit
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, formula_cell, grads
from qkv_tui.teach.stages.markdown import MarkdownPage


def final_name(trace: TraceContext) -> str:
    """The pane the final output is in: W_O's, or the heads' outputs side by side (or the one head's)."""
    comp = trace.comp
    if comp.W_O is not None:
        return "final"
    if len(comp.heads) > 1:
        return "concat"
    return "output" if comp.heads[0].part(Gated) is None else "gated"


class Loss(BackwardSpec):
    stage = Stage("loss", "Loss",
                  "The backward pass starts here. The loss ½·Σ (output − target)² says how far the output is from the"
                  " target; its gradient dO = output − target says, cell by cell, which way each output number should"
                  " move to lower it, and how strongly. Every gradient after this one is dO carried back, one"
                  " operation at a time, through what the forward pass did.")
    matrices = ("target", "dO", "loss")

    def runs(self, trace: TraceContext) -> bool:
        bw = trace.comp.scenario.backward
        return bw is not None and bw.target is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        n, d_out = trace.comp.output.shape
        return [Plan("dO", n, d_out), Plan("loss", n, 1)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        comp = trace.comp
        bw = comp.scenario.backward
        assert bw is not None and bw.target is not None and col is not None
        q = comp.scenario.labels[row]
        g = grads(trace)
        final = final_name(trace)
        if seg.target == "dO":
            value = float(g.dO[row, col])
            return formula_cell(
                trace, index, seg, row, col, d, value, lambda a, b: a - b,
                [float(comp.output[row, col]), float(bw.target[row, col])], lambda t: f"{t[0]} − {t[1]}",
                f"dO[{q},{col}] = {final}[{q},{col}] − target[{q},{col}]",
                (Ref(final, _head_of(trace, final), row, col), Ref("target", None, row, col)), plain_sum=True)
        rows = _loss_rows(g.dO)
        value = float(rows[row, 0])
        details: tuple[str, ...] = ()
        if row == comp.scenario.n - 1 and g.loss is not None:
            details = (_total_line(trace, rows, g.loss, d),)
        said = f"loss[{q}] = ½·Σ dO[{q}]²"
        if g.dO.shape[1] > MAX_TERMS:
            return Operation(index, seg, row, col, value, (Ref("dO", None, row),),
                             f"{said} = {trace.formatted('loss', None, value, d)}", details)
        return formula_cell(
            trace, index, seg, row, col, d, value, lambda *xs: 0.5 * sum(x * x for x in xs), list(g.dO[row]),
            lambda t: "0.5·(" + " + ".join(f"{x}·{x}" for x in t) + ")", said, (Ref("dO", None, row),), details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        bw = trace.comp.scenario.backward
        if bw is None:
            raise KeyError(name)
        if name == "target":
            if bw.target is None:
                raise KeyError(name)
            return bw.target
        g = grads(trace)
        if name == "dO":
            return g.dO
        return _loss_rows(g.dO)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        final = final_name(trace)
        if op.segment.target == "dO":
            return [(final, _head_of(trace, final)), ("target", None), ("dO", None)]
        return [("dO", None), ("loss", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dO", None)] if trace.comp.scenario.backward is not None else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return {"target": "target", "dO": "dO = output − target", "loss": "loss = ½·Σ dO² per row"}[name]

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return [page.table("target", None), "", *super().markdown(page, head)]


def _loss_rows(dO: Matrix) -> Matrix:
    """Each row's share of the loss, ½·Σ dO² over the row: (n, 1)."""
    rows: Matrix = 0.5 * (dO * dO).sum(axis=1, keepdims=True)
    return rows


def _head_of(trace: TraceContext, name: str) -> int | None:
    return 0 if name in ("output", "gated") else None


def _total_line(trace: TraceContext, rows: Matrix, loss: float, d: int) -> str:
    if len(rows) > MAX_TERMS:
        return f"loss = Σ rows = {trace.formatted('loss', None, loss, d)}"
    texts, result = fit(lambda *xs: sum(xs), [float(x) for x in rows[:, 0]], loss, d, plain_sum=True)
    return f"loss = {' + '.join(texts)} = {result}"


SPEC = Loss()
