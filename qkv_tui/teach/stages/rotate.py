"""The Rotate stage (RoPE, after Project): Q and K turned by each token's position, one cell at a time."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.arith import agrees, shown
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.stages.common import (
    K_SLOT,
    Q_SLOT,
    Key,
    Operation,
    Plan,
    Ref,
    Segment,
    Stage,
    StageSpec,
    hround,
    kv_shared,
    paren,
)
from qkv_tui.teach.stages.context import TraceContext

ROTATE_MEANING = (
    "RoPE turns Q and K (never V) by position: the dimensions go in pairs, and pair i of a token at"
    " position p turns by the angle p·θᵢ, with θᵢ = base^(−2i/dₖ) (the first pair fastest). Because both"
    " vectors turn by their own position, position enters the dot product q_m·k_n only through the"
    " distance m − n (RoFormer, Su et al. §3.2): a score depends on the two vectors and on how far apart"
    " the tokens are, not on where they sit. Which dimensions pair up is the layout: interleaved pairs"
    " neighbours (0,1), (2,3) (RoFormer, Meta's LLaMA code); half pairs i with i + dₖ/2 (GPT-NeoX's"
    " rotate_half, which Hugging Face's LLaMA code uses)."
)


class Rotate(StageSpec):
    stage = Stage("rotate", "Rotate", ROTATE_MEANING)
    per_head = True
    matrices = ("Q_rot", "K_rot")
    transposed = MappingProxyType({"K_rotT": "K_rot"})

    def runs(self, trace: TraceContext) -> bool:
        return trace.comp.scenario.rope is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        assert head is not None
        sc, hr = trace.comp.scenario, trace.comp.heads[head]
        plans = [Plan("Q_rot", sc.n, hr.d_k)]
        if trace.kv_owner[head] == head:
            plans.append(Plan("K_rot", sc.m, hr.d_k))
        return plans

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        comp = trace.comp
        assert h is not None and col is not None and comp.scenario.rope is not None
        value, text, details = rotate_lines(comp, h, seg.target, row, col, d, trace.hand)
        source = "Q" if seg.target == "Q_rot" else "K"
        pair = next(ab for ab in comp.scenario.rope.pairs(comp.heads[h].d_k) if col in ab)
        operands = (Ref(source, h, row, pair[0]), Ref(source, h, row, pair[1]))
        return Operation(index, seg, row, col, value, operands, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return getattr(trace.comp.heads[head], name)  # type: ignore[no-any-return]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        return [(target[0], op.head), (target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q_rot", head), ("K_rot", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        rope = trace.comp.scenario.rope
        hr = trace.comp.heads[head] if head is not None else None
        if name == "K_rotT":
            return f"K'ᵀ{kv_shared(trace, hr)}"
        pairs = ""
        if rope is not None and hr is not None:
            pairs = " pairs " + "".join(f"({a},{b})" for a, b in rope.pairs(hr.d_k))
        return f"{name[0]}' = rope({name[0]}){pairs}"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT if seg.target == "Q_rot" else K_SLOT})


SPEC = Rotate()


def rotate_lines(comp: Computation, h: int, target: str, row: int, col: int, d: int,
                 hand: int | None) -> tuple[float, str, tuple[str, ...]]:
    """One rotated cell: ``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
    sc = comp.scenario
    rope = sc.rope
    head = comp.heads[h]
    assert rope is not None and sc.positions is not None
    source = head.Q if target == "Q_rot" else head.K
    rotated = head.Q_rot if target == "Q_rot" else head.K_rot
    assert rotated is not None
    name = target[0]
    labels = sc.labels if name == "Q" else sc.key_labels
    token = labels[row]
    d_k = head.d_k
    pairs = rope.pairs(d_k)
    i = next(k for k, (a, b) in enumerate(pairs) if col in (a, b))
    a, b = pairs[i]
    pos = sc.positions[row]
    theta = rope.theta(i, d_k)
    angle = pos * theta
    value = float(rotated[row, col])
    result = fmt(value, False, d)
    first = col == a
    sym_angle = f"{pos}·θ{_sub(i)}"
    if first:
        symbolic = f"{name}'[{token},{a}] = {name}[{token},{a}]·cos({sym_angle}) − {name}[{token},{b}]·sin({sym_angle})"
    else:
        symbolic = f"{name}'[{token},{b}] = {name}[{token},{a}]·sin({sym_angle}) + {name}[{token},{b}]·cos({sym_angle})"
    src_int = bool(np.all(source == np.round(source)))
    text = ""
    details: tuple[str, ...] = ()
    for p in _places(d, hand is not None):
        va, vb = operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)
        if hand is not None:  # by hand cos and sin are written down rounded, and so is each product
            c, s = hround(math.cos(angle), hand), hround(math.sin(angle), hand)
        else:
            c, s = math.cos(angle), math.sin(angle)
        ct, st = operand(c, False, p), operand(s, False, p)
        if first:
            work = f"{va}·{ct} − {vb}·{st}"
            calc = shown(va) * shown(ct) - shown(vb) * shown(st)
        else:
            work = f"{va}·{st} + {vb}·{ct}"
            calc = shown(va) * shown(st) + shown(vb) * shown(ct)
        steps = [work]
        if hand is not None:
            if first:
                p1, p2 = hround(shown(va) * shown(ct), hand), hround(shown(vb) * shown(st), hand)
                steps.append(f"{operand(p1, False, hand)} − {paren(fmt(p2, False, hand))}")
                calc = p1 - p2
            else:
                p1, p2 = hround(shown(va) * shown(st), hand), hround(shown(vb) * shown(ct), hand)
                steps.append(f"{operand(p1, False, hand)} + {operand(p2, False, hand)}")
                calc = p1 + p2
        text = " = ".join([symbolic, *steps, result])
        theta_t = fmt(theta, False, max(p, 3))
        details = (
            f"pair {i} = dims ({a}, {b}) ({rope.layout} layout); θ{_sub(i)} = {_base(rope.base)}^(−2·{i}/{d_k})"
            f" = {theta_t}; angle = position·θ{_sub(i)} = {pos}·{theta_t} = {fmt(angle, False, max(p, 3))} radians",
            f"cos {fmt(angle, False, max(p, 3))} = {ct} and sin {fmt(angle, False, max(p, 3))} = {st}",
        )
        if not first and hand is None:  # the pair is complete: a rotation keeps its length
            before = [operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)]
            after = [operand(float(rotated[row, a]), False, p), operand(float(rotated[row, b]), False, p)]
            length = fmt(math.hypot(float(source[row, a]), float(source[row, b])), False, p)
            details += (f"a rotation keeps the pair's length, before: √({before[0]}·{before[0]} + {before[1]}·{before[1]})"
                        f" = {length}; after: √({after[0]}·{after[0]} + {after[1]}·{after[1]}) = {length}",)
            lengths_ok = all(agrees(math.hypot(shown(x), shown(y)), length) for x, y in (before, after))
        else:
            lengths_ok = True
        if lengths_ok and agrees(calc, result) and agrees(pos * shown(theta_t), fmt(angle, False, max(p, 3))):
            break
    return value, text, details


def _sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(ch)] for ch in str(i))


def _base(base: float) -> str:
    return str(int(base)) if base == round(base) and abs(base) < 1e15 else f"{base:g}"
