"""Stage Concat (several heads): the heads' outputs side by side, one wide row per token."""

from __future__ import annotations

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.stages.common import CONCAT, FormulaPart, Key, Operation, Plan, Ref, Segment, Stage, StageSpec
from qkv_tui.teach.stages.context import TraceContext


class Concat(StageSpec):
    stage = Stage("concat", "Concat",
                  "Each head produced its own output. Place them side by side, left to right, one wide row per token.")
    matrices = ("concat",)

    def runs(self, trace: TraceContext) -> bool:
        return len(trace.comp.heads) > 1

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("concat", trace.comp.scenario.n, trace.comp.concat.shape[1], per_row=True)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        q = trace.comp.scenario.labels[row]
        pieces, refs = [], []
        for h, head in enumerate(trace.comp.heads):
            pieces.append(", ".join(trace.formatted("output", h, v, d) for v in head.output[row]))
            refs.append(Ref("output", h, row))
        names = " | ".join(f"{head.name} out[{q}]" for head in trace.comp.heads)
        text = f"concat[{q}] = [{names}] = [{' | '.join(pieces)}]"
        return Operation(index, seg, row, None, None, tuple(refs), text)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        return trace.comp.concat

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        outputs: list[Key] = [("output", i) for i in range(len(trace.comp.heads))]
        return [*outputs, ("concat", None)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("concat", None)]

    def overview_tail(self, trace: TraceContext, head: int) -> list[Key]:
        # the other heads' outputs that Concat joins
        return [("output", g) for g in range(len(trace.comp.heads)) if g != head]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "concat = [" + " | ".join(f"out{i + 1}" for i in range(len(trace.comp.heads))) + "]"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        return [FormulaPart(CONCAT, "  → concat")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({CONCAT})


SPEC = Concat()
