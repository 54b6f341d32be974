"""The Rotate stage (RoPE, after Project): Q and K turned by each token's position, one cell at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import Computation
from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.rope_part import turn_of
from qkv_tui.core.scenario import Matrix, Scenario
from qkv_tui.core.variants import Rope
from qkv_tui.kernels.policy import EXACT, round_to
from qkv_tui.kernels.rope import Rotated
from qkv_tui.kernels.rope import rotate as rope_rotate
from qkv_tui.teach.arith import agrees, fit, shown
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
    counts,
    hround,
    kv_shared,
    paren,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, formula_cell, grads, has_backward, query_key_plans
from qkv_tui.teach.stages.markdown import MarkdownPage
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx
from qkv_tui.teach.stages.raw_projections import raw_projections
from qkv_tui.teach.stages.replaced import own_stages

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario
    from qkv_tui.kernels.attention import Turn


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
    matrices = ("Q_rot", "K_rot", "rope_freq")
    transposed = MappingProxyType({"K_rotT": "K_rot"})

    def row_label(self, trace: TraceContext, name: str, row: int) -> str | None:
        if name == "K_rot":
            return trace.comp.scenario.key_labels[row]
        return f"pair {row}" if name == "rope_freq" else None  # the frequencies, one row per pair

    def col_label(self, trace: TraceContext, name: str, col: int) -> str | None:
        rope = trace.comp.scenario.rope
        if name in ("Q_rot", "K_rot") and rope is not None:
            # which pair each dimension belongs to: the two layouts pair different columns
            pair = next((i for i, ab in enumerate(rope.pairs(trace.comp.heads[0].d_k)) if col in ab), None)
            return f"{col}=" if pair is None else f"{col}p{pair}"  # "=": partial rotary passes it through
        return ("θ", "θ'")[col] if name == "rope_freq" else None

    def runs(self, trace: TraceContext) -> bool:
        # a part with stages of its own turns its own way ([differential]: each half, teach/stages/differential.py)
        return trace.comp.scenario.rope is not None and not own_stages(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        text = self.stage.meaning
        rope = trace.comp.scenario.rope
        if rope is None:
            return text
        if rope.partial != 1.0:
            text += (" With partial rotary only the first r dimensions turn (θᵢ = base^(−2i/r)) and the rest pass"
                     " through unchanged: their share of each score ignores position.")
        if rope.scaling is not None:
            text += (" Scaling stretches the context a model was trained on by lowering the frequencies (θ → θ'),"
                     " so distances past the original context turn the slow pairs no further than training did.")
            if rope.attention_factor != 1.0:
                part = "each score" if rope.partial == 1.0 else "the turned dimensions' part of each score"
                text += (f" YaRN also multiplies cos and sin by a, so {part} is multiplied by a² (an a above 1"
                         " sharpens the softmax a little).")
        return text

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
        pair = next((ab for ab in comp.scenario.rope.pairs(comp.heads[h].d_k) if col in ab), (col,))
        operands = tuple(Ref(source, h, row, c) for c in pair)
        return Operation(index, seg, row, col, value, operands, text, details)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None:
            raise KeyError(name)
        if name == "rope_freq":
            return frequency_table(trace.comp, head)
        rotated = trace.comp.heads[head].part(Rotated)
        if rotated is None or name not in ("Q_rot", "K_rot"):
            raise KeyError(name)
        return rotated.Q_rot if name == "Q_rot" else rotated.K_rot

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        target = op.segment.target
        rope = trace.comp.scenario.rope
        if rope is not None and rope.scaling is not None:  # the frequencies, before → after scaling
            return [(turned_from(trace.comp, target[0])[0], op.head), (target, op.head), ("rope_freq", op.head)]
        return [(turned_from(trace.comp, target[0])[0], op.head), (target, op.head)]

    def overview(self, trace: TraceContext, head: int) -> list[Key]:
        return [("Q_rot", head), ("K_rot", head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        rope = trace.comp.scenario.rope
        hr = trace.comp.heads[head] if head is not None else None
        if name == "K_rotT":
            return f"K'ᵀ{kv_shared(trace, hr)}"
        if name == "rope_freq" and rope is not None and rope.scaling is not None:
            return f"θ → θ' {rope.scaling.type}"
        pairs = ""
        if rope is not None and hr is not None:
            pairs = " pairs " + "".join(f"({a},{b})" for a, b in rope.pairs(hr.d_k)) + passing(rope, hr.d_k)
        return f"{name[0]}' = rope({turned_from(trace.comp, name[0])[1]}){pairs}"

    def lights(self, seg: Segment) -> frozenset[int]:
        return frozenset({Q_SLOT if seg.target == "Q_rot" else K_SLOT})


    def markdown(self, page: MarkdownPage, head: int | None) -> list[str]:
        assert head is not None
        rope = page.trace.comp.scenario.rope
        assert rope is not None
        d_k = page.trace.comp.heads[head].d_k
        pairs = " ".join(f"({a},{b})" for a, b in rope.pairs(d_k))
        return [f"Pairs ({rope.layout} layout): {pairs}{passing(rope, d_k, True)}; positions"
                f" {', '.join(map(str, rope.positions))}.", *frequency_lines(rope, d_k, page.decimals), "",
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
            r = sc.rope.rotated(d_k)
            on, mark = ("a·" if sc.rope.attention_factor != 1.0 else ""), ("'" if sc.rope.scaling is not None else "")
            trig_cols = tuple(f"{on}{f} p·θ{mark}{_sub(i)}" for i in range(r // 2) for f in ("cos", "sin"))
            both = np.stack([cos, sin], axis=2).reshape(sc.n, r)  # (n, r): cos, sin of pair 0, then pair 1, …
            dk_note = f" (dₖ = {d_k})" if len(trig) > 1 else ""
            what = f"{on}cos and {on}sin" if on else "cos and sin"
            out.append(Table(f"trig.{d_k}", "cos/sin", f"{what} of each token's angle p·θ{mark}ᵢ{dk_note}",
                             "rotate", h, both, sc.labels, trig_cols, False, False, places=places))
        turned_pairs = sc.rope.pairs(d_k)
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
        source_name, src = turned_from(cells.comp, name)
        source = f"{source_name}.{table.head}"
        d_k = table.values.shape[1]
        token = sc.labels[i]
        found = next(((k, pair) for k, pair in enumerate(sc.rope.pairs(d_k)) if j in pair), None)
        if found is None:  # partial rotary: copied as it is
            return f"{name}'[{token},{j}] = {src}[{token},{j}] = {cells.txt(source, i, j)} = {answer}"
        k, (a, b) = found
        on = "a·" if sc.rope.attention_factor != 1.0 else ""
        angle = f"{sc.positions[i]}·θ{chr(39) if sc.rope.scaling is not None else ''}{_sub(k)}"
        trig = f"trig.{d_k}"
        cos, sin = cells.txt(trig, i, 2 * k), cells.txt(trig, i, 2 * k + 1)
        va, vb = cells.txt(source, i, a), cells.txt(source, i, b)
        if j == a:
            return (f"{name}'[{token},{a}] = {src}[{token},{a}]·{on}cos({angle}) − {src}[{token},{b}]·{on}sin({angle})"
                    f" = {va}·{cos} − {vb}·{sin} = {answer}")
        return (f"{name}'[{token},{b}] = {src}[{token},{a}]·{on}sin({angle}) + {src}[{token},{b}]·{on}cos({angle})"
                f" = {va}·{sin} + {vb}·{cos} = {answer}")


SPEC = Rotate()


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Multiplies and adds only (no product of matrices, nothing counted apart): the bytes of Q and K in and out.
    The cos and sin of each position are taken as computed on the fly."""
    from qkv_tui.core.cost import B, Count, fig, shapes, term

    s = shapes(sc)
    q, k = (ph.R, ("Σd_k", s.sum_dk), B(ph)), (ph.NEW, ("Σ_kv d_k", s.kv_dk), B(ph))
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name, read=fig(term("Q", *q), term("K", *k)),
                 written=fig(term("Q'", *q), term("K'", *k)))


def turned_from(comp: Computation, role: str) -> tuple[str, str]:
    """The matrix RoPE turns for "Q" or "K" and its name in the arithmetic: as the parts before the rotation left
    it (QK-norm's normalised one, core/part_questions.py scored_suffix and its ``scored_mark``), else as projected."""
    turners = list(ask.answering(comp.heads[0], "scored_suffix"))  # every head has the scenario's same parts
    before = turners[:next((i for i, r in enumerate(turners) if isinstance(r, Rotated)), len(turners))]
    if not before:
        return role, role
    return f"{role}{before[-1].scored_suffix}", f"{role}{before[-1].scored_mark}"


def rotate_lines(comp: Computation, h: int, target: str, row: int, col: int, d: int,
                 hand: int | None) -> tuple[float, str, tuple[str, ...]]:
    """One rotated cell: ``Q'[love,0] = Q[love,0]·cos(1·θ₀) − Q[love,1]·sin(1·θ₀) = 0·0.540 − 2·0.841 = -1.683``."""
    sc = comp.scenario
    rope = sc.rope
    head = comp.heads[h]
    assert rope is not None and sc.positions is not None
    source = head.before("Q", Rotated) if target == "Q_rot" else head.before("K", Rotated)
    rotated = head.need(Rotated).Q_rot if target == "Q_rot" else head.need(Rotated).K_rot
    assert rotated is not None
    name = target[0]
    src = turned_from(comp, name)[1]
    labels = sc.labels if name == "Q" else sc.key_labels
    token = labels[row]
    d_k = head.d_k
    pairs = rope.pairs(d_k)
    found = next((k for k, (a, b) in enumerate(pairs) if col in (a, b)), None)
    if found is None:  # partial rotary: a dimension past the turned ones passes through as it is
        return passed_lines(comp, h, target, row, col, d)
    i = found
    a, b = pairs[i]
    pos = sc.positions[row]
    theta = rope.theta(i, d_k)
    angle = pos * theta
    value = float(rotated[row, col])
    result = fmt(value, False, d)
    first = col == a
    factor = rope.attention_factor  # YaRN's: on cos and sin
    on = "" if factor == 1.0 else "a·"
    mark = "'" if rope.scaling is not None else ""  # θ'ᵢ: the frequency after scaling
    sym_angle = f"{pos}·θ{mark}{_sub(i)}"
    if first:
        symbolic = (f"{name}'[{token},{a}] = {src}[{token},{a}]·{on}cos({sym_angle})"
                    f" − {src}[{token},{b}]·{on}sin({sym_angle})")
    else:
        symbolic = (f"{name}'[{token},{b}] = {src}[{token},{a}]·{on}sin({sym_angle})"
                    f" + {src}[{token},{b}]·{on}cos({sym_angle})")
    src_int = bool(np.all(source == np.round(source)))
    text = ""
    details: tuple[str, ...] = ()
    for p in _places(d, hand is not None):
        va, vb = operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)
        trig = _trig(angle, factor, hand, p)
        ct, st = trig.cos, trig.sin
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
        angle_t = fmt(angle, False, max(p, 3))
        r = rope.rotated(d_k)
        formula = f"θ{_sub(i)} = {_base(rope.base)}^(−2·{i}/{r})"
        if rope.scaling is None:
            freq, scaled_ok = f"{formula} = {theta_t}", True
        else:
            scaled, scaled_ok = scaling_line(rope, i, d_k, p)
            freq = f"{formula} = {fmt(rope.theta_unscaled(i, d_k), False, max(p, 3))} → θ'{_sub(i)} = {theta_t}"
        details = (
            f"pair {i} = dims ({a}, {b}) ({rope.layout} layout{_turned(rope, d_k)}); {freq};"
            f" angle = position·θ{mark}{_sub(i)} = {pos}·{theta_t} = {angle_t} radians",
        )
        if rope.scaling is not None:
            details += (scaled,)
        details += (f"cos {angle_t} = {trig.plain_cos} and sin {angle_t} = {trig.plain_sin}",)
        if factor != 1.0:
            details += (_factor_words(rope, d_k),
                        f"cos·a = {trig.plain_cos}·{trig.factor} = {ct} | sin·a = {trig.plain_sin}·{trig.factor} = {st}")
        if not first and hand is None and factor == 1.0:  # the pair is complete: a rotation keeps its length
            before = [operand(float(source[row, a]), src_int, p), operand(float(source[row, b]), src_int, p)]
            after = [operand(float(rotated[row, a]), False, p), operand(float(rotated[row, b]), False, p)]
            length = fmt(math.hypot(float(source[row, a]), float(source[row, b])), False, p)
            details += (f"a rotation keeps the pair's length, before: √({before[0]}·{before[0]} + {before[1]}·{before[1]})"
                        f" = {length}; after: √({after[0]}·{after[0]} + {after[1]}·{after[1]}) = {length}",)
            lengths_ok = all(agrees(math.hypot(shown(x), shown(y)), length) for x, y in (before, after))
        else:
            lengths_ok = True
        if (lengths_ok and scaled_ok and trig.ok and agrees(calc, result)
                and agrees(pos * shown(theta_t), angle_t)):
            break
    return value, text, details


def passed_lines(comp: Computation, h: int, target: str, row: int, col: int, d: int) -> tuple[float, str, tuple[str, ...]]:
    """A dimension that partial rotary leaves unturned: ``Q'[love,2] = Q[love,2] = 1.000 (not rotated: partial 0.5)``."""
    rope = comp.scenario.rope
    assert rope is not None
    head = comp.heads[h]
    rotated = head.need(Rotated).Q_rot if target == "Q_rot" else head.need(Rotated).K_rot
    assert rotated is not None
    name = target[0]
    src = turned_from(comp, name)[1]
    token = (comp.scenario.labels if name == "Q" else comp.scenario.key_labels)[row]
    value = float(rotated[row, col])
    r = rope.rotated(head.d_k)
    text = f"{name}'[{token},{col}] = {src}[{token},{col}] = {fmt(value, False, d)} (not rotated: partial {rope.partial:g})"
    turned = "".join(f"({a},{b})" for a, b in rope.pairs(head.d_k))
    return value, text, (
        f"partial = {rope.partial:g}: only the first r = int({rope.partial:g}·{head.d_k}) = {r} of dₖ = {head.d_k}"
        f" dimensions turn, in pairs {turned}; dims {_span(r, head.d_k)} pass through unchanged, so their part of"
        " each score ignores position (GPT-NeoX and Phi turn a share of each head, as Hugging Face's"
        " partial_rotary_factor)",
    )


def passing(rope: Rope, d_k: int, words: bool = False) -> str:
    """What a title (or, in ``words``, a page) adds for partial rotary: `` pass 2,3``; nothing when every dimension turns."""
    r = rope.rotated(d_k)
    if r == d_k:
        return ""
    return f"; dims {_span(r, d_k)} pass through" if words else f" pass {','.join(map(str, range(r, d_k)))}"


@fixed
class _Trig:
    """cos and sin of one angle as a line shows them: plain, the attention factor, and the factors' products."""

    plain_cos: str
    plain_sin: str
    factor: str
    cos: str  # what the arithmetic multiplies by: cos·a (cos without a factor)
    sin: str
    ok: bool  # the products recompute from the shown numbers


def _trig(angle: float, factor: float, hand: int | None, p: int) -> _Trig:
    """By hand each of cos, sin and a is written down rounded, and so is each product cos·a (kernels/policy.py)."""
    c, s = math.cos(angle), math.sin(angle)
    if hand is not None:
        c, s = hround(c, hand), hround(s, hand)
    if factor == 1.0:
        ct, st = operand(c, False, p), operand(s, False, p)
        return _Trig(ct, st, "1", ct, st, True)
    f = hround(factor, hand) if hand is not None else factor
    ca, sa = (hround(c * f, hand), hround(s * f, hand)) if hand is not None else (c * f, s * f)
    pc, ps, ft = operand(c, False, p), operand(s, False, p), fmt(f, False, max(p, 3))
    ct, st = operand(ca, False, p), operand(sa, False, p)
    ok = agrees(shown(pc) * shown(ft), ct) and agrees(shown(ps) * shown(ft), st)
    return _Trig(pc, ps, ft, ct, st, ok)


def _span(r: int, d_k: int) -> str:
    """The unturned dims in words: ``2 and 3``, ``4 to 7``."""
    return f"{r} and {d_k - 1}" if d_k - r == 2 else f"{r} to {d_k - 1}"


def _turned(rope: Rope, d_k: int) -> str:
    r = rope.rotated(d_k)
    return "" if r == d_k else f", first {r} of {d_k} dims turn"


def factor_how(rope: Rope) -> str:
    """Where YaRN's attention factor a comes from, in words: given, DeepSeek's ratio of two m's, or the default."""
    sc = rope.scaling
    assert sc is not None
    if sc.attention_factor is not None:
        return "attention_factor, as given"
    if sc.mscale and sc.mscale_all_dim:  # transformers' _compute_yarn_parameters, DeepSeek's form
        f = _num(sc.factor)
        return (f"m(mscale) / m(mscale_all_dim), m(x) = 0.1·x·ln(factor) + 1: (0.1·{_num(sc.mscale)}·ln {f} + 1)"
                f" / (0.1·{_num(sc.mscale_all_dim)}·ln {f} + 1)")
    return "YaRN's default 0.1·ln(factor) + 1"


def _factor_words(rope: Rope, d_k: int) -> str:
    return (f"a = {fmt(rope.attention_factor, False, 3)} ({factor_how(rope)}) multiplies cos and sin, so"
            f" {_carries(rope, d_k)} a² = {squared(rope.attention_factor)}")


def _carries(rope: Rope, d_k: int) -> str:
    """What a² multiplies: the whole score, or under partial rotary only the turned dimensions' part of it
    (transformers' apply_rotary_pos_emb turns q_rot and concatenates q_pass unchanged)."""
    r = rope.rotated(d_k)
    if r == d_k:
        return "each score carries"
    return f"only the turned dims' part of each score (dims 0 to {r - 1}; dims {_span(r, d_k)} pass as they are) carries"


def squared(a: float) -> str:
    """a² as shown; ``a·a`` because ``a ** 2`` raises OverflowError past float64's range, where a·a is inf."""
    sq = a * a
    return fmt(sq, False, 3) if math.isfinite(sq) else f"{fmt(a, False, 3)}², past float64's range"


def scaling_line(rope: Rope, i: int, d_k: int, p: int) -> tuple[str, bool]:
    """How pair i's frequency is scaled, worked from the shown numbers; and whether it recomputes."""
    sc = rope.scaling
    assert sc is not None
    q = max(p, 3)
    before = rope.theta_unscaled(i, d_k)
    after = rope.theta(i, d_k)
    w = float(rope.kept(d_k)[i])
    bt, at, ft = fmt(before, False, q), fmt(after, False, q), _num(sc.factor)
    divided = f"θ'{_sub(i)} = θ{_sub(i)} / factor = {bt} / {ft} = {at}"
    kept = f"θ'{_sub(i)} = θ{_sub(i)} = {at}"
    blend_ok = True
    if w == 0.0:
        how, ok = divided, agrees(shown(bt) / sc.factor, at)
    elif w == 1.0:
        how, ok = kept, True
    else:
        wt, vt = fmt(w, False, q), fmt(1 - w, False, q)
        how = (f"θ'{_sub(i)} = w·θ{_sub(i)} + (1 − w)·θ{_sub(i)} / factor = {wt}·{bt} + {vt}·{bt} / {ft} = {at}")
        ok = agrees(shown(wt) * shown(bt) + shown(vt) * shown(bt) / sc.factor, at)
    if sc.type == "linear":
        return f"linear scaling (positions interpolated: p·θ / {ft} is the angle of position p / {ft}): {how}", ok
    if sc.type == "llama3":
        assert sc.original_max_position_embeddings is not None
        assert sc.low_freq_factor is not None and sc.high_freq_factor is not None
        old = _num(sc.original_max_position_embeddings)
        wave = 2 * math.pi / before
        wt_ = fmt(wave, False, q)
        lo, hi = _num(sc.low_freq_factor), _num(sc.high_freq_factor)
        orig = sc.original_max_position_embeddings
        if w == 1.0:
            band = f"λ < {old} / {hi} = {fmt(orig / sc.high_freq_factor, False, q)}: high frequency, kept"
        elif w == 0.0:
            band = f"λ > {old} / {lo} = {fmt(orig / sc.low_freq_factor, False, q)}: low frequency, divided"
        else:
            band = f"between {old} / {hi} and {old} / {lo}: blended with w = ({old} / λ − {lo}) / ({hi} − {lo})"
            wv = fmt(w, False, q)
            band += f" = ({old} / {wt_} − {lo}) / ({hi} − {lo}) = {wv}"
            blend_ok = agrees((sc.original_max_position_embeddings / shown(wt_) - sc.low_freq_factor)
                              / (sc.high_freq_factor - sc.low_freq_factor), wv)
        return (f"llama3 scaling: wavelength λ = 2π / θ{_sub(i)} = {wt_} positions; {band} | {how}",
                ok and blend_ok and agrees(2 * math.pi / shown(bt), wt_) if w not in (0.0, 1.0) else ok)
    band, band_ok = _yarn_band(rope, i, d_k, q)
    return f"{band} | {how}", ok and band_ok


@lru_cache(maxsize=4096)  # the same for every token's cells of a pair: a page works it once per pair and digits
def _yarn_band(rope: Rope, i: int, d_k: int, q: int) -> tuple[str, bool]:
    """Why YaRN keeps, blends or divides pair i: how many times it turns over the original context L, and where
    the ramp lies (transformers' find_correction_range: the pairs that turn beta_fast and beta_slow times over
    L, rounded outward, then clamped). Every number is worked from the scenario's own."""
    sc = rope.scaling
    assert sc is not None and sc.original_max_position_embeddings is not None
    r = rope.rotated(d_k)
    L = float(sc.original_max_position_embeddings)
    before, w = rope.theta_unscaled(i, d_k), float(rope.kept(d_k)[i])
    c_fast, c_slow = sc.correction_dims(rope.base, r)
    low, high = sc.yarn_range(rope.base, r)
    fast, slow = _num(sc.fast), _num(sc.slow)
    turns = L * before / (2 * math.pi)
    (lt, tt), turns_t = fit(lambda a, t: a * t / (2 * math.pi), [L, before], turns, q)
    said = f"pair {i} turns L·θ{_sub(i)}/2π = {lt}·{tt}/2π = {turns_t} times in the original {lt} positions"
    if w == 1.0 and turns > sc.fast:
        said += f", more than beta_fast = {fast}: before the ramp, it keeps θ (w = 1)"
    elif w == 1.0:
        said += f", fewer than beta_fast = {fast}, yet it keeps θ (w = 1): the ramp's start was clamped to it"
    elif w == 0.0:
        said += f", fewer than beta_slow = {slow}: past the ramp, θ is divided (w = 0)"
    else:
        said += (f": on the ramp, w = 1 − ramp{_sub(i)} = 1 − ({i} − {_num(low)}) / ({_num(high)} − {_num(low)})"
                 f" = {fmt(w, False, q)}")

    def where(beta: float, c: float) -> str:
        (rt, at, bt, et), ct = fit(lambda d, a, b, e: d * math.log(a / (2 * math.pi * b)) / (2 * math.log(e)),
                                   [r, L, beta, rope.base], c, q)
        return f"{rt}·ln({at}/(2π·{bt}))/(2·ln {et}) = {ct}"

    fast_t, slow_t = where(sc.fast, c_fast), where(sc.slow, c_slow)
    rounded = (f", rounded outward to {_num(math.floor(c_fast))} and {_num(math.ceil(c_slow))}" if sc.truncate
               else " (truncate = false: not rounded)")
    start, end = (math.floor(c_fast), math.ceil(c_slow)) if sc.truncate else (c_fast, c_slow)
    ramp = (f"the ramp runs from pair {_num(low)} to {_num(high)}: the pair that turns β times over L is"
            f" r·ln(L/(2π·β))/(2·ln base) with r = {r} turned dims, {fast_t} for beta_fast and {slow_t} for"
            f" beta_slow{rounded}")
    if start < 0:
        ramp += ("; a start before pair 0 is clamped to 0 (transformers' find_correction_range), so pair 0 keeps θ"
                 " however few times it turns")
    if end > r - 1:
        ramp += (f"; the end is clamped to r − 1 = {r - 1}, a count of dimensions, past the last pair ({r // 2 - 1}),"
                 " so no pair reaches the ramp's top")
    elif high > r // 2 - 1:
        ramp += f"; the end lies past the last pair ({r // 2 - 1}), so no pair reaches the ramp's top"
    return f"yarn scaling: {said}; {ramp}", agrees(shown(lt) * shown(tt) / (2 * math.pi), turns_t)


def _num(x: float) -> str:
    """A parameter as written: ``8`` for 8.0, else its shortest form."""
    return str(int(x)) if float(x) == round(float(x)) and abs(x) < 1e15 else f"{float(x):g}"


def frequency_lines(rope: Rope, d_k: int, d: int) -> list[str]:
    """The Markdown page's frequencies, before → after scaling, and YaRN's factor; none for plain RoPE."""
    if rope.scaling is None:
        return []
    before, after = (np.array([f(i, d_k) for i in range(rope.rotated(d_k) // 2)])
                     for f in (rope.theta_unscaled, rope.theta))
    pairs = ", ".join(f"θ{_sub(i)} {fmt(float(x), False, max(d, 3))} → {fmt(float(y), False, max(d, 3))}"
                      for i, (x, y) in enumerate(zip(before, after)))
    out = ["", f"Frequencies before → after {rope.scaling.type} scaling (factor {_num(rope.scaling.factor)}): {pairs}."]
    if rope.attention_factor != 1.0:
        out.append(f"Attention factor a = {fmt(rope.attention_factor, False, max(d, 3))} multiplies cos and sin:"
                   f" {_carries(rope, d_k)} a² = {squared(rope.attention_factor)}.")
    return out


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
        turn = turn_of(rope, positions, d_k)  # (n, r/2): a·cos and a·sin of the scaled angles
        assert turn is not None
        turned = [chain.rounded(Q_raw[h]) for h, head in enumerate(sc.heads) if head.d_k == d_k]
        turned += [chain.rounded(K_raw[g]) for g in chain.readers if sc.heads[g].d_k == d_k]
        places = _trig_places(chain.d, turn.cos, turn.sin, turn.pairs, turned)
        trig[d_k] = (round_to(turn.cos, places), round_to(turn.sin, places), places)
    return trig


def _exact_turn(M: Matrix, cos: Matrix, sin: Matrix, pairs: Sequence[tuple[int, int]]) -> Matrix:
    """Each pair (a, b) of row r turns by the angle whose cos and sin are cos[r, i], sin[r, i], kept exact."""
    return rope_rotate(M, cos, sin, pairs, EXACT)


def _trig_places(d: int, cos: Matrix, sin: Matrix, pairs: Sequence[tuple[int, int]], rotated: list[Matrix]) -> int:
    """Decimals for cos and sin: the page's, or more while the printed values would move a rotated cell by more
    than half a unit of the page's last digit (a Q of 40 needs more digits of cos than a Q of 1)."""
    for places in range(d, d + MAX_GUARD + 1):
        c: Matrix = round_to(cos, places)
        s: Matrix = round_to(sin, places)
        if all(np.max(np.abs(_exact_turn(M, c, s, pairs) - _exact_turn(M, cos, sin, pairs)), initial=0.0)
               <= 0.5 * 10.0 ** -d for M in rotated):
            return places
    return d + MAX_GUARD


FREQ_COLUMNS = ("θ", "θ'")  # the frequency pane: before and after scaling, one row per pair


def frequency_table(comp: Computation, head: int) -> Matrix:
    """Each pair's frequency before and after scaling: (r/2, 2)."""
    rope = comp.scenario.rope
    assert rope is not None
    d_k = comp.heads[head].d_k
    r = rope.rotated(d_k)
    before = np.array([rope.theta_unscaled(i, d_k) for i in range(r // 2)])  # (r/2,)
    out: Matrix = np.stack([before, rope.inv_freq(d_k)], axis=1)
    return out


def rope_notes(rope: Rope, d_k: int) -> list[str]:
    """A worksheet's words for partial rotary and scaling, under its Rotate rule; none for plain RoPE."""
    out = []
    r = rope.rotated(d_k)
    if r != d_k:
        out.append(f"  Partial rotary (partial = {rope.partial:g}): only the first r = {r} of dₖ = {d_k} dimensions"
                   f" turn, with θᵢ = {_base(rope.base)}^(−2i/{r}); dims {_span(r, d_k)} of Q' and K' are Q's and K's,"
                   " copied.")
    if rope.scaling is not None:
        pairs = ", ".join(f"θ{_sub(i)} {_num_text(rope.theta_unscaled(i, d_k))} → {_num_text(rope.theta(i, d_k))}"
                          for i in range(r // 2))
        factor = (f"; the table holds a·cos and a·sin, with a = {_num_text(rope.attention_factor)} (YaRN's attention"
                  f" factor: {_carries(rope, d_k)} a²)" if rope.attention_factor != 1.0 else "")
        out.append(f"  {rope.scaling.type} scaling (factor {_num(rope.scaling.factor)}): the angles p·θ'ᵢ use the"
                   f" scaled frequencies, {pairs}{factor}.")
    return out


def _num_text(x: float) -> str:
    return f"{x:.6g}"


class RotateBack(BackwardSpec):
    """RoPE read backwards: a rotation's transpose is the rotation by the opposite angle."""

    stage = Stage("drotate", "dRotate",
                  "Back through RoPE. Each pair (a, b) was turned by the angle p·θ; turning it back by −p·θ takes the"
                  " gradient to the vectors before the turn: da = dQ'[a]·cos + dQ'[b]·sin, db = dQ'[b]·cos − dQ'[a]·sin"
                  " (a rotation's transpose is the opposite rotation, so lengths are kept). Dimensions RoPE does not"
                  " turn pass their gradient straight through.")
    per_head = True
    matrices = ("dQ_t", "dK_t")

    def runs(self, trace: TraceContext) -> bool:
        # a part with stages of its own turns back its own way ([differential]: each half, teach/stages/differential_backward.py)
        return has_backward(trace) and trace.comp.scenario.rope is not None and not own_stages(trace)

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return query_key_plans(trace, head, "dQ_t", "dK_t")

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        comp = trace.comp
        sc, hr, hg = comp.scenario, comp.heads[h], grads(trace).heads[h]
        turn = turn_of(sc.rope, sc.positions, hr.d_k)
        assert turn is not None
        query = seg.target == "dQ_t"
        src, done = ("dQ_s", hg.dQ_turned) if query else ("dK_s", hg.dK_turned)
        grad = hg.attend.dQ_used if query else hg.attend.dK_used
        name = "d" + turned_from(comp, "Q" if query else "K")[1]  # dQ̂: at the normalised Q, where QK-norm turned it
        label = sc.labels[row] if query else sc.key_labels[row]
        value = float(done[row, col])
        shown_src = "dQ'" if query else "dK'"
        pair = next(((i, a, b) for i, (a, b) in enumerate(turn.pairs) if col in (a, b)), None)
        return turned_back(trace, index, seg, row, col, d, value, (name, shown_src, label), src, grad, turn, pair)

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not has_backward(trace) or trace.comp.scenario.rope is None:
            raise KeyError(name)
        hg = grads(trace).heads[head]
        return hg.dQ_turned if name == "dQ_t" else hg.dK_turned

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        h = op.head
        return [("dQ_s", h), ("dQ_t", h)] if op.segment.target == "dQ_t" else [("dK_s", h), ("dK_t", h)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        what = "dQ" if name == "dQ_t" else "dK"
        return f"{what} = {what}' turned back (−p·θ)"


BACKWARD = RotateBack()


def turned_back(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, value: float,
                names: tuple[str, str, str], src: str, grad: Matrix, turn: Turn,
                pair: tuple[int, int, int] | None) -> Operation:
    """A gradient cell turned back by the transpose of its pair's rotation (``pair``: the pair's index among the
    turn's and its two columns, or None where the column is not turned); ``names``: the gradient's name, the name
    of the gradient it is turned back from, and the row's label. One rule for RoPE's own dRotate and each block's."""
    name, shown_src, label = names
    h = seg.head
    assert h is not None
    if pair is None:
        result = trace.formatted(seg.target, h, value, d)
        return Operation(index, seg, row, col, value, (Ref(src, h, row, col),),
                         f"{name}[{label},{col}] = {shown_src}[{label},{col}] = {result} (not turned)")
    i, a, b = pair
    cos, sin = float(turn.cos[row, i]), float(turn.sin[row, i])
    x, y = float(grad[row, a]), float(grad[row, b])
    refs = (Ref(src, h, row, a), Ref(src, h, row, b))
    if col == a:
        return formula_cell(trace, index, seg, row, col, d, value, lambda u, c, v, s: u * c + v * s,
                            [x, cos, y, sin], lambda t: f"{t[0]}·{t[1]} + {t[2]}·{t[3]}",
                            f"{name}[{label},{a}] = {shown_src}[{label},{a}]·cos + {shown_src}[{label},{b}]·sin", refs)
    return formula_cell(trace, index, seg, row, col, d, value, lambda v, c, u, s: v * c - u * s,
                        [y, cos, x, sin], lambda t: f"{t[0]}·{t[1]} − {t[2]}·{t[3]}",
                        f"{name}[{label},{b}] = {shown_src}[{label},{b}]·cos − {shown_src}[{label},{a}]·sin", refs)
