"""Stage Score: each Query dotted with every Key, the raw logits (of the rotated vectors under RoPE)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import is_integral
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
    counts,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, dot_cell, grads, has_backward, query_key_plans
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table
from qkv_tui.teach.stages.replaced import softmax_runs

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


class Score(StageSpec):
    stage = Stage("score", "Score",
                  "Each Query dots with every Key: cell (i, j) is how much token i wants token j."
                  " A high score means 'this token looks relevant to me'. These are raw logits, not yet probabilities.")
    per_head = True
    matrices = ("scores",)
    styles = MappingProxyType({"scores": PaneStyle(row_max=True)})

    def runs(self, trace: TraceContext) -> bool:
        return softmax_runs(trace)  # [linear] and [deltanet] replace it

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
        qn, kn, qs, ks = scored(trace, h)
        work = dot_line(head.Q_used[row], head.K_used[col], trace.integral(qn, h), trace.integral(kn, h), result, d,
                        trace.hand)
        text = f"scores[{q},{k}] = {qs}[{q}]·{ks}[{k}] = {work}"
        details: tuple[str, ...] = ()
        if sc.positions is not None:  # a part that turns the vectors by position says what position does here
            i, j = sc.positions[row], sc.positions[col]
            details = tuple(ask.said(head, "score.distance", query=i, key=j, distance=i - j))
        return Operation(index, seg, row, col, value, (Ref(qn, h, row), Ref(kn, h, col)), text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return trace.comp.heads[head].scores

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        qn, kn, _, _ = scored(trace, h)
        return [(qn, h), (f"{kn}T", h), ("scores", h)]  # K's pane transposed, as Kᵀ is read

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("scores", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        _, _, qs, ks = scored(trace, head)
        return f"scores = {qs}·{ks}ᵀ"

    def formula(self, trace: TraceContext, op: Operation) -> list[FormulaPart]:
        _, _, qs, ks = scored(trace, op.head)
        return [FormulaPart(Q_SLOT, qs), FormulaPart(QK_DOT, "·"), FormulaPart(K_SLOT, f"{ks}ᵀ")]

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT, QK_DOT, K_SLOT})


    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        h, g, sc = head, chain.owners[head], chain.sc
        qn, kn, qs, ks = scored_names(chain.comp.heads[h])
        Q_used = chain.values(f"{qn}.{h}")
        K_used = chain.values(f"{kn}.{g}")
        scores_raw = Q_used @ K_used.T  # (n, m) from the printed Q and K (normalised and turned, where they are)
        # a part that turns Q and K by numbers that are never whole (a rotation's cos and sin) makes them decimals
        read_whole = (not ask.scenario_has(sc, "scores_with_decimals") and chain.printed[f"{qn}.{h}"].whole
                      and chain.printed[f"{kn}.{g}"].whole)
        score_of = f"{qs}·{ks}ᵀ"
        return [Table(f"scores.{h}", "scores", f"scores = {score_of}", "score", h, chain.rounded(scores_raw), sc.labels,
                      sc.key_labels, False, True, whole=read_whole and is_integral(scores_raw))]

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        h = table.head
        assert h is not None
        sc = cells.sc
        q, k = sc.labels[row], sc.key_labels[col]
        s, g = f".{h}", f".{cells.owners[h]}"
        qn, kn, qs, ks = scored_names(cells.comp.heads[h])
        qk, kk = f"{qn}{s}", f"{kn}{g}"
        width = cells.tables[qk].values.shape[1]
        terms = " + ".join(f"{cells.txt(qk, row, c)}·{cells.txt(kk, col, c)}" for c in range(width))
        return f"scores[{q},{k}] = {qs}[{q}]·{ks}[{k}] = {terms} = {answer}"


SPEC = Score()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Q·Kᵀ for every head, every cell (masked ones too) of the keys it attends (a part's selection: top_k a row);
    each K/V head's K read once."""
    from qkv_tui.core.cost import B, Count, fig, per_heads, shapes, term

    s = shapes(sc)
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 matmul=per_heads("QKᵀ", s.h, "h", tuple(dk for dk, _ in s.heads), "d_k", ("2", 2), ph.R, ph.A),
                 read=fig(term("Q", ph.R, ("Σd_k", s.sum_dk), B(ph)), term("K", ph.SEEN, ("Σ_kv d_k", s.kv_dk), B(ph))),
                 written=fig(term("scores", ("h", s.h), ph.R, ph.A, B(ph))))


def scored_names(hr: HeadResult) -> tuple[str, str, str, str]:
    """The matrices a head scores (and a state rule reads) and their names in the arithmetic, as the last of its
    parts that turns Q and K names them (core/part_questions.py scored_suffix, and its ``scored_mark``): turned
    (Q_rot: Q', K'), normalised (Q_norm: Q̂, K̂), or as projected (Q, K)."""
    suffix = ask.scored_suffix(hr)
    marks = [str(record.scored_mark) for record in ask.answering(hr, "scored_mark")]
    mark = marks[-1] if marks else ""
    return f"Q{suffix}", f"K{suffix}", f"Q{mark}", f"K{mark}"


def scored(trace: TraceContext, head: int | None = None) -> tuple[str, str, str, str]:
    """:func:`scored_names` of a head of the trace (the first where none is named: every head has the same parts
    that turn Q and K, the scenario's tables)."""
    return scored_names(trace.comp.heads[head or 0])


class ScoreBack(BackwardSpec):
    """Score read backwards: scores = Q·Kᵀ, so dQ = dscores·K and dK = dscoresᵀ·Q."""

    stage = Stage("dscore", "dScore",
                  "Back through Score. scores[t,j] was Q[t]·K[j], so Q[t] moved every score of its row by K[j]:"
                  " dQ = dscores·K, each Query pulled toward the Keys whose scores should rise and away from the others."
                  " And K[j] met every Query of its column: dK = dscoresᵀ·Q. With the scale folded in, dQ = dS·K / scale.")
    per_head = True
    matrices = ("dQ_s", "dK_s")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and softmax_runs(trace)  # [linear] and [deltanet] have their own

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        # a part that steps the scaled scores (the soft-cap) says how its step folds into the gradient
        said = [] if head is None else ask.said(trace.comp.heads[head], "dscore.scale")
        if not said:
            return self.stage.meaning
        return self.stage.meaning.replace("With the scale folded in, dQ = dS·K / scale.", said[0])

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return query_key_plans(trace, head, "dQ_s", "dK_s")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        ab, hr, sc = grads(trace).heads[h].attend, trace.comp.heads[h], trace.comp.scenario
        q_name, k_name, q_label, k_label = scored(trace, h)
        if seg.target == "dQ_s":
            t = sc.labels[row]
            return dot_cell(trace, index, seg, row, col, d, float(ab.dQ_used[row, col]), ab.dscores[row],
                            hr.K_used[:, col], False, trace.integral(k_name, h),
                            f"d{q_label}[{t},{col}] = dscores[{t}]·{k_label}[:,{col}]",
                            (Ref("dscores", h, row), Ref(k_name, h, None, col)))
        k = sc.key_labels[row]
        return dot_cell(trace, index, seg, row, col, d, float(ab.dK_used[row, col]), ab.dscores[:, row],
                        hr.Q_used[:, col], False, trace.integral(q_name, h),
                        f"d{k_label}[{k},{col}] = dscores[:,{k}]·{q_label}[:,{col}]",
                        (Ref("dscores", h, None, row), Ref(q_name, h, None, col)))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace):
            raise KeyError(name)
        ab = grads(trace).heads[head].attend
        return ab.dQ_used if name == "dQ_s" else ab.dK_used

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        q_name, k_name, _, _ = scored(trace, h)
        if op.segment.target == "dQ_s":
            return [("dscores", h), (k_name, h), ("dQ_s", h)]
        return [("dscores", h), (q_name, h), ("dK_s", h)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("dQ_s", head), ("dK_s", head)] if has_backward(trace) else []

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        _, _, q_label, k_label = scored(trace, head)
        if not softmax_runs(trace):  # [linear], [deltanet]: the gradient their own backward stage left here
            return f"d{q_label}" if name == "dQ_s" else f"d{k_label}"
        return f"d{q_label} = dscores·{k_label}" if name == "dQ_s" else f"d{k_label} = dscoresᵀ·{q_label}"


BACKWARD = ScoreBack()
