"""Stage Score: each Query dotted with every Key, the raw logits (of the rotated vectors under RoPE)."""

from __future__ import annotations

from types import MappingProxyType

from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import dot_line
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    QK_DOT,
    FormulaPart,
    Key,
    Operation,
    PaneStyle,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
)
from qkv_tui.teach.stages.context import TraceContext


class Score(StageSpec):
    stage = Stage("score", "Score",
                  "Each Query dots with every Key: cell (i, j) is how much token i wants token j."
                  " A high score means 'this token looks relevant to me'. These are raw logits, not yet probabilities.")
    per_head = True
    matrices = ("scores",)
    styles = MappingProxyType({"scores": PaneStyle(row_max=True)})

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        sc = trace.comp.scenario
        return [Plan("scores", sc.n, sc.m)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        head = trace.comp.heads[h]
        value = float(head.scores[row, col])
        sc = trace.comp.scenario
        q, k = sc.labels[row], sc.key_labels[col]
        result = trace.formatted("scores", h, value, d)
        qn, kn = ("Q_rot", "K_rot") if head.Q_rot is not None else ("Q", "K")
        qs, ks = ("Q'", "K'") if head.Q_rot is not None else ("Q", "K")
        work = dot_line(head.Q_used[row], head.K_used[col], trace.integral(qn, h), trace.integral(kn, h), result, d,
                        trace.hand)
        text = f"scores[{q},{k}] = {qs}[{q}]·{ks}[{k}] = {work}"
        details: tuple[str, ...] = ()
        if head.Q_rot is not None and sc.positions is not None:
            distance = sc.positions[row] - sc.positions[col]
            details = (f"both vectors are rotated by their own position, so position enters this score only through"
                       f" the distance {sc.positions[row]} − {sc.positions[col]} = {distance}; the vectors themselves"
                       " decide the rest",)
        return Operation(index, seg, row, col, value, (Ref(qn, h, row), Ref(kn, h, col)), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return trace.comp.heads[head].scores

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        if trace.comp.scenario.rope is not None:
            return [("Q_rot", h), ("K_rotT", h), ("scores", h)]
        return [("Q", h), ("KT", h), ("scores", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("scores", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "scores = Q'·K'ᵀ" if trace.comp.scenario.rope is not None else "scores = Q·Kᵀ"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        rotated = "'" if trace.comp.scenario.rope is not None else ""
        return [FormulaPart(Q_SLOT, f"Q{rotated}"), FormulaPart(QK_DOT, "·"), FormulaPart(K_SLOT, f"K{rotated}ᵀ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT, QK_DOT, K_SLOT})


SPEC = Score()
