"""Stage Rotate of latent attention ([mla] with [rope]): the one shared rotary key k_R, turned once, and each
head's rotary query q_R; the other dimensions (q_C, k_C) never turn."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages import mla_parts as parts
from qkv_tui.teach.stages import mla_sheet
from qkv_tui.teach.stages.common import K_SLOT, Q_SLOT, Key, Operation, Plan, Ref, Segment, Stage, StageSpec
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table


class MlaRotate(StageSpec):
    stage = Stage("mla_rotate", "Rotate",
                  "RoPE turns only the rotary parts: each head's q_R, and the one key k_R that every head shares"
                  " (so the cache keeps it once, beside the latent). The expanded q_C and k_C never turn: a rotation"
                  " between W_UK and the query would stop W_UK folding into the query, the absorbed form that lets"
                  " attention run on the latent itself.")
    per_head = True
    matrices = ("k_R", "q_R")

    def runs(self, trace: TraceContext) -> bool:
        mla = trace.comp.scenario.mla
        return mla is not None and mla.rope is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        plans = [Plan("k_R", n, mla.d_rope)] if head == 0 else []  # shared: turned once
        return [*plans, Plan("q_R", n, mla.d_rope)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        comp, mla = trace.comp, parts.mla_of(trace)
        rope, positions = mla.rope, comp.scenario.positions
        assert rope is not None and positions is not None
        source = "k_R_raw" if seg.target == "k_R" else "q_R_raw"
        src_h = None if seg.target == "k_R" else seg.head
        src_row = parts.value(comp, source, src_h)[row]
        pair, (a, b) = next((i, ab) for i, ab in enumerate(rope.pairs(mla.d_rope)) if col in ab)
        v = float(parts.value(comp, seg.target, seg.head)[row, col])
        text, details = parts.turn_line(parts.shown_name(seg.target), parts.shown_name(source),
                                        comp.scenario.labels[row], positions[row], pair, a, b, col, src_row, v,
                                        rope.theta(pair, mla.d_rope), d, trace.hand)
        return Operation(index, seg, row, col, v, tuple(Ref(source, src_h, row, c) for c in (a, b)), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return parts.value(trace.comp, name, head)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        if op.segment.target == "k_R":
            return [("k_R_raw", None), ("k_R", 0)]
        return [("q_R_raw", op.head), ("q_R", op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("q_R", head), ("k_R", 0)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        rope = parts.mla_of(trace).rope
        pairs = "" if rope is None else " pairs " + "".join(f"({a},{b})" for a, b in rope.pairs(parts.mla_of(trace).d_rope))
        return {"k_R": f"k_R' = rope(k_R), shared{pairs}", "q_R": f"q_R' = rope(q_R){pairs}"}[name]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({K_SLOT if seg.target == "k_R" else Q_SLOT})

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        return mla_sheet.rotate_tables(chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return mla_sheet.line(cells, table, row, col, answer)


SPEC = MlaRotate()
