"""RoPE's Rotate and dRotate for a head scored in blocks of columns (core/part_questions.py score_width: a
differential head's two halves), each block turned on its own as a head of the block's width: the one-map Rotate
and dRotate (teach/stages/rotate.py) step aside for a head whose part has stages of its own, and these take their
place, every cell read from the head's record of the turn (kernels/rope.py Rotated, with its turn and block) and
its gradients (core/gradients.py HeadGrad). Registered by [rope]'s faces (core/variants/rope.py), after the one-map
stages, so the trace asks these for Q', K', dQ and dK: where no head is turned in blocks they answer as the one-map
stages do (``_one``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_tui.core.fmt import fmt
from qkv_tui.core.head import HeadResult
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.attention import Turn
from qkv_tui.kernels.rope import Rotated
from qkv_tui.teach.stages import rotate
from qkv_tui.teach.stages.common import Key, Operation, Plan, Ref, Segment, Stage, StageSpec
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, formula_cell, grads, has_backward

if TYPE_CHECKING:
    from qkv_tui.teach.stages.markdown import MarkdownPage

# each matrix's name in the page's table corners, as the worked lines write it
CORNERS = {"Q_rot": "Q'", "K_rot": "K'", "dQ_t": "dQ", "dK_t": "dK"}
SUB = "₀₁₂₃₄₅₆₇₈₉"


def _turned(hr: HeadResult) -> tuple[Rotated, Turn, int]:
    """The head's record of the turn, its cos and sin (for a block's width) and the block's width."""
    rot = hr.need(Rotated)
    assert rot.turn is not None and rot.block is not None
    return rot, rot.turn, rot.block


def in_blocks(trace: TraceContext) -> bool:
    """Whether a head's Queries and Keys were turned a block at a time."""
    return any((r := hr.part(Rotated)) is not None and r.block is not None for hr in trace.comp.heads)


def _blocks(trace: TraceContext, head: int | None) -> bool:
    """Whether the head (any head, where None) was turned in blocks."""
    if head is None:
        return in_blocks(trace)
    r = trace.comp.heads[head].part(Rotated)
    return r is not None and r.block is not None


def _sub(i: int) -> str:
    return "".join(SUB[int(c)] for c in str(i))


def _each(hr: HeadResult, block: int) -> str:
    """How a title names each block: a half, where there are two."""
    return "each half" if hr.d_k == 2 * block else "each block"


def _markdown(spec: StageSpec, page: MarkdownPage, head: int | None) -> list[str]:
    """Its tables named as its lines name them (Q', not Q_rot), then its worked lines."""
    out: list[str] = []
    for plan in spec.segments(page.trace, head):
        out += [page.table(plan.target, head, CORNERS.get(plan.target, plan.target)), ""]
    return out + page.worked(spec.stage.key, head)


class RotateBlocks(StageSpec):
    """RoPE on each block of Q and K on its own, with the frequencies of the block's width."""

    stage = Stage("rotate_blocks", "Rotate",
                  "RoPE turns Q and K (never V) by position, each half on its own: [Q₁ | Q₂] is two d-wide"
                  " vectors per token, and each turns as a head of width d would (θᵢ = base^(−2i/d), the pairs of"
                  " width d), because each map scores its own half. A pair (a, b) of a token at position p turns by"
                  " p·θᵢ: a' = a·cos − b·sin, b' = a·sin + b·cos.")
    per_head = True
    matrices = ("Q_rot", "K_rot")

    def runs(self, trace: TraceContext) -> bool:
        return in_blocks(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, w = trace.comp.scenario, trace.comp.heads[head].d_k
        plans = [Plan("Q_rot", sc.n, w)]
        if trace.kv_owner[head] == head:
            plans.append(Plan("K_rot", sc.m, w))
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, sc = trace.comp.heads[h], trace.comp.scenario
        rot, turn, block = _turned(hr)
        assert sc.positions is not None
        query = seg.target == "Q_rot"
        source, done = (hr.Q, rot.Q_rot) if query else (hr.K, rot.K_rot)
        name = "Q" if query else "K"
        label = (sc.labels if query else sc.key_labels)[row]
        value = float(done[row, col])
        start = col - col % block  # the block's first column: its pairs count from there
        which = _sub(start // block + 1)
        pair = next(((i, start + a, start + b) for i, (a, b) in enumerate(turn.pairs) if col - start in (a, b)), None)
        if pair is None:  # partial rotary: a dimension of the block past the turned ones passes through
            text = f"{name}'[{label},{col}] = {name}[{label},{col}] = {fmt(value, False, d)} (not turned)"
            return Operation(index, seg, row, col, value, (Ref(name, h, row, col),), text)
        i, a, b = pair
        cos, sin = float(turn.cos[row, i]), float(turn.sin[row, i])
        x, y = float(source[row, a]), float(source[row, b])
        refs = (Ref(name, h, row, a), Ref(name, h, row, b))
        angle = f"{sc.positions[row]}·θ{_sub(i)}"
        details = (f"pair {i} of {name}{which}: columns ({a}, {b}); θ{_sub(i)} of width d = {block}",)
        if col == a:
            said = f"{name}'[{label},{a}] = {name}[{label},{a}]·cos({angle}) − {name}[{label},{b}]·sin({angle})"
            return formula_cell(trace, index, seg, row, col, d, value, lambda u, c, v, t: u * c - v * t,
                                [x, cos, y, sin], lambda t: f"{t[0]}·{t[1]} − {t[2]}·{t[3]}", said, refs, details)
        said = f"{name}'[{label},{b}] = {name}[{label},{a}]·sin({angle}) + {name}[{label},{b}]·cos({angle})"
        return formula_cell(trace, index, seg, row, col, d, value, lambda u, t, v, c: u * t + v * c, [x, sin, y, cos],
                            lambda t: f"{t[0]}·{t[1]} + {t[2]}·{t[3]}", said, refs, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not _blocks(trace, head):
            return rotate.SPEC.matrix(trace, name, head)
        assert head is not None
        rot = trace.comp.heads[head].need(Rotated)
        return rot.Q_rot if name == "Q_rot" else rot.K_rot

    # where no head is turned in blocks, Q' and K' are the one-map Rotate's (teach/stages/rotate.py)
    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        return super().made_from(trace, name, head) if _blocks(trace, head) else rotate.SPEC.made_from(trace, name, head)

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return super().row_label(trace, name, row) if in_blocks(trace) else rotate.SPEC.row_label(trace, name, row)

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        return super().col_label(trace, name, col) if in_blocks(trace) else rotate.SPEC.col_label(trace, name, col)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        name = op.segment.target[0]
        return [(name, op.head), (op.segment.target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q_rot", head), ("K_rot", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if not _blocks(trace, head):
            return rotate.SPEC.title(trace, name, head)
        hr = trace.comp.heads[head or 0]
        return f"{name[0]}' = rope({name[0]}), {_each(hr, _turned(hr)[2])}"

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return _markdown(self, page, head)


class RotateBlocksBack(BackwardSpec):
    """dRotate for a head turned a block at a time: each block of dQ' and dK' turned back on its own."""

    stage = Stage("drotate_blocks", "dRotate",
                  "Back through RoPE, each half on its own as the forward turned it: a pair (a, b) of a half turned by"
                  " p·θ turns back by −p·θ, da = dQ'[a]·cos + dQ'[b]·sin and db = dQ'[b]·cos − dQ'[a]·sin, with the"
                  " frequencies of width d (the half), not 2d. Dimensions RoPE does not turn pass straight through.")
    per_head = True
    matrices = ("dQ_t", "dK_t")

    def runs(self, trace: TraceContext) -> bool:
        return has_backward(trace) and in_blocks(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, w = trace.comp.scenario, trace.comp.heads[head].d_k
        return [Plan("dQ_t", sc.n, w), Plan("dK_t", sc.m, w)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        hr, hg, sc = trace.comp.heads[h], grads(trace).heads[h], trace.comp.scenario
        _rot, turn, block = _turned(hr)
        assert hg.dQ_rot is not None and hg.dK_rot is not None
        query = seg.target == "dQ_t"
        src = "dQ_s" if query else "dK_s"
        grad, done = (hg.dQ_rot, hg.dQ_turned) if query else (hg.dK_rot, hg.dK_turned)
        name, shown_src = ("dQ", "dQ'") if query else ("dK", "dK'")
        label = sc.labels[row] if query else sc.key_labels[row]
        value = float(done[row, col])
        start = col - col % block  # the block's first column: its pairs count from there
        within = col - start
        pair = next(((i, start + p, start + q) for i, (p, q) in enumerate(turn.pairs) if within in (p, q)), None)
        return rotate.turned_back(trace, index, seg, row, col, d, value, (name, shown_src, label), src, grad, turn,
                                  pair)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not _blocks(trace, head):
            return rotate.BACKWARD.matrix(trace, name, head)
        if head is None or not self.runs(trace):
            raise KeyError(name)
        hg = grads(trace).heads[head]
        return hg.dQ_turned if name == "dQ_t" else hg.dK_turned

    # where no head is turned in blocks, dQ and dK are the one-map dRotate's (teach/stages/rotate.py)
    def made_from(self, trace: TraceContext, name: str, head: int | None) -> list[Key] | None:
        if _blocks(trace, head):
            return super().made_from(trace, name, head)
        return rotate.BACKWARD.made_from(trace, name, head)

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        return super().row_label(trace, name, row) if in_blocks(trace) else rotate.BACKWARD.row_label(trace, name, row)

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        return super().col_label(trace, name, col) if in_blocks(trace) else rotate.BACKWARD.col_label(trace, name, col)

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        return [("dQ_s", h), ("dQ_t", h)] if op.segment.target == "dQ_t" else [("dK_s", h), ("dK_t", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        if not _blocks(trace, head):
            return rotate.BACKWARD.title(trace, name, head)
        what = "dQ" if name == "dQ_t" else "dK"
        hr = trace.comp.heads[head or 0]
        return f"{what} = {what}' turned back (−p·θ), {_each(hr, _turned(hr)[2])}"

    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        return _markdown(self, page, head)


ROTATE = RotateBlocks()
BACKWARD = RotateBlocksBack()
