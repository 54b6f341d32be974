"""Stage W_O (where the scenario has one): the concatenated heads mixed into the model's output width."""

from __future__ import annotations

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
    dot_bias_line,
)
from qkv_tui.teach.stages.concat import printed_concat
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx


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
        source = "concat" if len(sc.heads) > 1 else "output" if sc.heads[0].W_G is None else "gated"
        final = printed_concat(chain) @ sc.W_O + (sc.b_O[None, :] if sc.b_O is not None else 0.0)
        out.append(Table("final", "final", f"final = {source}·W_O" + (" + b_O" if sc.b_O is not None else ""), "wo", None,
                         chain.rounded(final), sc.labels, width, False, True))
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        q = cells.sc.labels[row]
        # with one head, the output itself is what W_O multiplies (no concat table on the page)
        source, label = ("concat", "concat") if "concat" in cells.tables else ("output.0", "output")
        if source == "output.0" and "gated.0" in cells.tables:  # a gated head: W_O multiplies the gated output
            source, label = "gated.0", "gated"
        plus = f" + b_O[{col}]" if "b_O" in cells.tables else ""
        return (f"final[{q},{col}] = {label}[{q}]·W_O[:,{col}]{plus} = {cells.dot(source, row, 'W_O', col)}"
                f"{cells.bias('b_O', col)} = {answer}")


SPEC = WO()
