"""Stage Expand ([mla]): each head's keys k_C = c_KV·W_UK and values v_C = c_KV·W_UV from the one latent, and
its queries q_C (and the rotary q_R, before it turns) from X·W_Q, or from the query latent through W_UQ."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages import mla_sheet
from qkv_tui.teach.stages.common import K_SLOT, Q_SLOT, V_SLOT, Key, Operation, Plan, Segment, Stage, StageSpec, x_in
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table


class Expand(StageSpec):
    stage = Stage("expand", "Expand",
                  "Each head expands the shared latent into its own keys k_C = c_KV·W_UK and values v_C = c_KV·W_UV:"
                  " tokens with the same latent get the same keys and values in every head. The queries come from"
                  " their own weights, each head's columns [nope | rope]: q_C is dotted with k_C, q_R turns by"
                  " position and meets the shared rotary key.")
    per_head = True
    matrices = ("q_C", "q_R_raw", "k_C", "v_C")

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.mla is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        return [Plan("q_C", n, mla.d_nope), Plan("q_R_raw", n, mla.d_rope), Plan("k_C", n, mla.d_nope),
                Plan("v_C", n, mla.d_v)]

    def _source(self, trace: TraceContext, target: str) -> tuple[str, str]:
        mla = parts.mla_of(trace)
        if target in ("k_C", "v_C"):
            return parts.latent(mla), "W_UK" if target == "k_C" else "W_UV"
        if mla.W_DQ is not None:
            return parts.query_latent(mla), "W_UQ"
        return x_in(trace)[0], "W_QA"

    def _column(self, trace: TraceContext, target: str, h: int, col: int) -> int:
        mla = parts.mla_of(trace)
        if target == "k_C":
            return h * mla.d_nope + col
        if target == "v_C":
            return h * mla.d_v + col
        return h * mla.d_qk + (col if target == "q_C" else mla.d_nope + col)

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None and seg.head is not None
        source, weight = self._source(trace, seg.target)
        return parts.dot_op(trace, index, seg, row, col, d, source=source, weight=weight,
                            wcol=self._column(trace, seg.target, seg.head, col))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return parts.value(trace.comp, name, head)

    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        source, weight = self._source(trace, name)
        return [(source, None), (weight, None)]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        source, weight = self._source(trace, op.segment.target)
        return [(source, None), (weight, None), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("q_C", head), ("k_C", head), ("v_C", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        mla = parts.mla_of(trace)
        src = {"c_KV": "ĉ_KV", "c_KV_raw": "c_KV", "c_Q": "ĉ_Q", "c_Q_raw": "c_Q"}
        source, _ = self._source(trace, name)
        shown = src.get(source, x_in(trace)[1])
        weight = "W_UQ" if mla.W_DQ is not None else "W_Q"
        return {"q_C": f"q_C = {shown}·{weight} (nope)", "q_R_raw": f"q_R = {shown}·{weight} (rope)",
                "k_C": f"k_C = {shown}·W_UK", "v_C": f"v_C = {shown}·W_UV"}[name]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({{"k_C": K_SLOT, "v_C": V_SLOT}.get(seg.target, Q_SLOT)})

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        return mla_sheet.expand_tables(chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return mla_sheet.line(cells, table, row, col, answer)


SPEC = Expand()
