"""The Rotate stage (RoPE, after Project): Q and K turned by each token's position, one cell at a time."""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.kernels.policy import EXACT, round_to
from qkv_tui.kernels.rope import angles as rope_angles
from qkv_tui.kernels.rope import pairs as rope_pairs
from qkv_tui.kernels.rope import rotate as rope_rotate
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
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.project import raw_projections

MAX_GUARD = 8  # more decimals than the page's that the cos/sin table may get; float64 has no more to give

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
        source = turned_from(comp, seg.target[0])[0]
        pair = next(ab for ab in comp.scenario.rope.pairs(comp.heads[h].d_k) if col in ab)
        operands = (Ref(source, h, row, pair[0]), Ref(source, h, row, pair[1]))
        return Operation(index, seg, row, col, value, operands, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        return getattr(trace.comp.heads[head], name)  # type: ignore[no-any-return]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        return [(turned_from(trace.comp, target[0])[0], op.head), (target, op.head)]

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
        return f"{name[0]}' = rope({turned_from(trace.comp, name[0])[1]}){pairs}"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT if seg.target == "Q_rot" else K_SLOT})


    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        rope = page.trace.comp.scenario.rope
        assert rope is not None
        pairs = " ".join(f"({a},{b})" for a, b in rope.pairs(page.trace.comp.heads[head].d_k))
        return [f"Pairs ({rope.layout} layout): {pairs}; positions {', '.join(map(str, rope.positions))}.", "",
                page.table("Q_rot", head, "Q'"), "", page.table("K_rot", head, "K'"), "",
                *page.worked(self.stage.key, head)]

    def worksheet_tables(self, chain: PrintedChain, head: int | None) -> list[Table]:
        assert head is not None
        h, sc = head, chain.sc
        assert sc.rope is not None
        d_k = sc.heads[h].d_k
        trig = chain.memo("trig", lambda: _trig_tables(chain))
        cos, sin, places = trig[d_k]
        out: list[Table] = []
        if f"trig.{d_k}" not in chain.printed:  # once per width, in the first head that turns with it
            trig_cols = tuple(f"{f} p·θ{_sub(i)}" for i in range(d_k // 2) for f in ("cos", "sin"))
            both = np.stack([cos, sin], axis=2).reshape(sc.n, d_k)  # (n, d_k): cos, sin of pair 0, then pair 1, …
            dk_note = f" (dₖ = {d_k})" if len(trig) > 1 else ""
            out.append(Table(f"trig.{d_k}", "cos/sin", f"cos and sin of each token's angle p·θᵢ{dk_note}",
                             "rotate", h, both, sc.labels, trig_cols, False, False, places=places))
        turned_pairs = rope_pairs(sc.rope.layout, d_k)
        q_key, k_key = (f"{turned_from(chain.comp, role)[0]}.{h}" for role in ("Q", "K"))
        Q_rot = rope_rotate(chain.values(q_key), cos, sin, turned_pairs, chain.page)
        out.append(Table(f"Q_rot.{h}", "Q'", "Q' = Q turned by position", "rotate", h, Q_rot, sc.labels,
                         idx(d_k), False, True))
        if chain.owners[h] == h:
            K_rot = rope_rotate(chain.values(k_key), cos, sin, turned_pairs, chain.page)
            out.append(Table(f"K_rot.{h}", "K'", f"K' = K turned by position{chain.kv_suffix(h)}", "rotate", h, K_rot,
                             sc.key_labels, idx(d_k), False, True, readers=chain.kv_readers(h)))
        return out

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        """``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
        sc, i, j = cells.sc, row, col
        assert sc.rope is not None and sc.positions is not None and table.head is not None
        name = table.name[0]
        source_name, src = turned_from(cells.sc, name)
        source = f"{source_name}.{table.head}"
        d_k = table.values.shape[1]
        k, (a, b) = next((k, pair) for k, pair in enumerate(rope_pairs(sc.rope.layout, d_k)) if j in pair)
        token = sc.labels[i]
        angle = f"{sc.positions[i]}·θ{_sub(k)}"
        trig = f"trig.{d_k}"
        cos, sin = cells.txt(trig, i, 2 * k), cells.txt(trig, i, 2 * k + 1)
        va, vb = cells.txt(source, i, a), cells.txt(source, i, b)
        if j == a:
            return (f"{name}'[{token},{a}] = {src}[{token},{a}]·cos({angle}) − {src}[{token},{b}]·sin({angle})"
                    f" = {va}·{cos} − {vb}·{sin} = {answer}")
        return (f"{name}'[{token},{b}] = {src}[{token},{a}]·sin({angle}) + {src}[{token},{b}]·cos({angle})"
                f" = {va}·{sin} + {vb}·{cos} = {answer}")


SPEC = Rotate()


def turned_from(where: Computation | Scenario, role: str) -> tuple[str, str]:
    """The matrix RoPE turns for "Q" or "K" and its name in the arithmetic: the normalised one under QK-norm."""
    sc = where.scenario if isinstance(where, Computation) else where
    return (f"{role}_norm", f"{role}̂") if sc.qk_norm is not None else (role, role)


def rotate_lines(comp: Computation, h: int, target: str, row: int, col: int, d: int,
                 hand: int | None) -> tuple[float, str, tuple[str, ...]]:
    """One rotated cell: ``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
    sc = comp.scenario
    rope = sc.rope
    head = comp.heads[h]
    assert rope is not None and sc.positions is not None
    source = head.Q_turned if target == "Q_rot" else head.K_turned
    rotated = head.Q_rot if target == "Q_rot" else head.K_rot
    assert rotated is not None
    name = target[0]
    src = turned_from(sc, name)[1]
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
        symbolic = f"{name}'[{token},{a}] = {src}[{token},{a}]·cos({sym_angle}) − {src}[{token},{b}]·sin({sym_angle})"
    else:
        symbolic = f"{name}'[{token},{b}] = {src}[{token},{a}]·sin({sym_angle}) + {src}[{token},{b}]·cos({sym_angle})"
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


def _trig_tables(chain: PrintedChain) -> dict[int, tuple[Matrix, Matrix, int]]:
    """d_k -> (cos, sin, places), as printed: each width's table, with the digits every head turning with it needs."""
    sc = chain.sc
    rope, positions = sc.rope, sc.positions
    assert rope is not None and positions is not None
    Q_raw, K_raw, _ = raw_projections(chain)
    trig: dict[int, tuple[Matrix, Matrix, int]] = {}
    for d_k in sorted({head.d_k for head in sc.heads}):
        angles = rope_angles(rope.base, d_k, positions)  # (n, d_k/2)
        turned = [chain.rounded(Q_raw[h]) for h, head in enumerate(sc.heads) if head.d_k == d_k]
        turned += [chain.rounded(K_raw[g]) for g in chain.readers if sc.heads[g].d_k == d_k]
        places = _trig_places(chain.d, angles, rope.layout, turned)
        trig[d_k] = (round_to(np.cos(angles), places), round_to(np.sin(angles), places), places)
    return trig


def _exact_turn(M: Matrix, cos: Matrix, sin: Matrix, layout: str) -> Matrix:
    """Each pair (a, b) of row r turns by the angle whose cos and sin are cos[r, i], sin[r, i], kept exact."""
    return rope_rotate(M, cos, sin, rope_pairs(layout, M.shape[1]), EXACT)


def _trig_places(d: int, angles: Matrix, layout: str, rotated: list[Matrix]) -> int:
    """Decimals for cos and sin: the page's, or more while the printed values would move a rotated cell by more
    than half a unit of the page's last digit (a Q of 40 needs more digits of cos than a Q of 1)."""
    cos: Matrix = np.cos(angles)
    sin: Matrix = np.sin(angles)
    for places in range(d, d + MAX_GUARD + 1):
        c: Matrix = round_to(cos, places)
        s: Matrix = round_to(sin, places)
        if all(np.max(np.abs(_exact_turn(M, c, s, layout) - _exact_turn(M, cos, sin, layout)), initial=0.0)
               <= 0.5 * 10.0 ** -d for M in rotated):
            return places
    return d + MAX_GUARD
