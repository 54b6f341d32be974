"""Stage Rotate of latent attention ([mla] with [rope]): the one shared rotary key k_R, turned once, and each
head's rotary query q_R; the other dimensions (q_C, k_C) never turn."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from qkv_tui.core.fmt import fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.core.variants import Rope
from qkv_tui.kernels.policy import round_to
from qkv_tui.kernels.rope import rotate as rope_rotate
from qkv_tui.teach.arith import agrees, shown
from qkv_tui.teach.arith import tries as _places
from qkv_tui.teach.stages import mla_grads, mla_sheet
from qkv_tui.teach.stages import mla_parts as parts
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
    paren,
    x_in,
)
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.grads import BackwardSpec, formula_cell, sum_cell
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, idx

if TYPE_CHECKING:  # the cost view's module loads on its first use
    from qkv_tui.core.cost import Count, Phase
    from qkv_tui.core.scenario import Scenario


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
        text, details = _turn_line(parts.shown_name(seg.target), parts.shown_name(source),
                                   comp.scenario.labels[row], positions[row], pair, a, b, col, src_row, v,
                                   rope.theta(pair, mla.d_rope), d, trace.hand, rope, mla.d_rope)
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
        return sheet_tables(chain, head)

    def worksheet_line(self, cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
        return sheet_line(cells, table, row, col, answer)


SPEC = MlaRotate()


def _turn_line(target: str, src: str, token: str, pos: int, pair: int, a: int, b: int, col: int, src_row: Matrix,
               result_value: float, theta: float, d: int, hand: int | None,
               rope: Rope | None = None, d_rope: int = 0) -> tuple[str, tuple[str, ...]]:
    """One turned cell of q_R or k_R: ``k_R'[love,0] = k_R[love,0]·cos(1·θ₀) − k_R[love,1]·sin(1·θ₀) = …``.
    ``rope`` (and the rotary width ``d_rope``) where it is scaled: YaRN's θ' and its attention factor a on cos and
    sin, worked as the Rotate stage of plain heads works them (rotate.py)."""
    if rope is not None and rope.scaling is not None:
        return _scaled_turn_line(target, src, token, pos, pair, a, b, col, src_row, result_value, rope, d_rope, d,
                                 hand)
    first = col == a
    angle = pos * theta
    sym = f"{pos}·θ{parts.sub(pair)}"
    if first:
        symbolic = f"{target}[{token},{a}] = {src}[{token},{a}]·cos({sym}) − {src}[{token},{b}]·sin({sym})"
    else:
        symbolic = f"{target}[{token},{b}] = {src}[{token},{a}]·sin({sym}) + {src}[{token},{b}]·cos({sym})"
    result = fmt(result_value, False, d)
    src_int = bool(np.all(src_row == np.round(src_row)))
    text, details = "", ("",)
    for p in _places(d, hand is not None):
        va, vb = operand(float(src_row[a]), src_int, p), operand(float(src_row[b]), src_int, p)
        c, s = math.cos(angle), math.sin(angle)
        if hand is not None:
            c, s = hround(c, hand), hround(s, hand)
        ct, st = operand(c, False, p), operand(s, False, p)
        steps, calc = _turn_steps(va, vb, ct, st, first, hand)
        text = " = ".join([symbolic, *steps, result])
        theta_t, angle_t = fmt(theta, False, max(p, 3)), fmt(angle, False, max(p, 3))
        details = (f"pair {pair} = dims ({a}, {b}); angle = position·θ{parts.sub(pair)} = {pos}·{theta_t} = {angle_t}"
                   f" radians; cos {angle_t} = {ct} and sin {angle_t} = {st}",)
        if agrees(calc, result) and agrees(pos * shown(theta_t), angle_t):
            break
    return text, details


def _turn_steps(va: str, vb: str, ct: str, st: str, first: bool, hand: int | None) -> tuple[list[str], float]:
    """The products of a turned cell as written, a·cos − b·sin (or a·sin + b·cos), then by hand each product
    rounded; and what they give on a calculator."""
    if first:
        steps = [f"{va}·{ct} − {vb}·{st}"]
        calc = shown(va) * shown(ct) - shown(vb) * shown(st)
    else:
        steps = [f"{va}·{st} + {vb}·{ct}"]
        calc = shown(va) * shown(st) + shown(vb) * shown(ct)
    if hand is not None:
        x1 = hround(shown(va) * shown(ct if first else st), hand)
        x2 = hround(shown(vb) * shown(st if first else ct), hand)
        steps.append(f"{operand(x1, False, hand)} − {paren(fmt(x2, False, hand))}" if first
                     else f"{operand(x1, False, hand)} + {operand(x2, False, hand)}")
        calc = x1 - x2 if first else x1 + x2
    return steps, calc


def _scaled_turn_line(target: str, src: str, token: str, pos: int, pair: int, a: int, b: int, col: int,
                      src_row: Matrix, result_value: float, rope: Rope, d_rope: int, d: int,
                      hand: int | None) -> tuple[str, tuple[str, ...]]:
    """A turned cell under [rope.scaling] (DeepSeek's YaRN): the angle p·θ'ᵢ of the scaled frequency, and cos and
    sin times YaRN's attention factor a where it is not 1 (by hand each written down rounded, then the products)."""
    from qkv_tui.teach.stages.rotate import _base, _sub, _trig, factor_how, scaling_line, squared

    first = col == a
    theta = rope.theta(pair, d_rope)
    angle = pos * theta
    factor = rope.attention_factor
    on = "" if factor == 1.0 else "a·"
    sym = f"{pos}·θ'{_sub(pair)}"
    if first:
        symbolic = f"{target}[{token},{a}] = {src}[{token},{a}]·{on}cos({sym}) − {src}[{token},{b}]·{on}sin({sym})"
    else:
        symbolic = f"{target}[{token},{b}] = {src}[{token},{a}]·{on}sin({sym}) + {src}[{token},{b}]·{on}cos({sym})"
    result = fmt(result_value, False, d)
    src_int = bool(np.all(src_row == np.round(src_row)))
    text = ""
    details: tuple[str, ...] = ("",)
    for p in _places(d, hand is not None):
        va, vb = operand(float(src_row[a]), src_int, p), operand(float(src_row[b]), src_int, p)
        trig = _trig(angle, factor, hand, p)
        ct, st = trig.cos, trig.sin
        steps, calc = _turn_steps(va, vb, ct, st, first, hand)
        text = " = ".join([symbolic, *steps, result])
        q = max(p, 3)
        theta_t, angle_t = fmt(theta, False, q), fmt(angle, False, q)
        scaled, scaled_ok = scaling_line(rope, pair, d_rope, p)
        before = fmt(rope.theta_unscaled(pair, d_rope), False, q)
        details = (f"pair {pair} = dims ({a}, {b}); θ{_sub(pair)} = {_base(rope.base)}^(−2·{pair}/{d_rope}) = {before}"
                   f" → θ'{_sub(pair)} = {theta_t}; angle = position·θ'{_sub(pair)} = {pos}·{theta_t} = {angle_t}"
                   " radians", scaled, f"cos {angle_t} = {trig.plain_cos} and sin {angle_t} = {trig.plain_sin}")
        if factor != 1.0:
            details += (f"a = {fmt(factor, False, 3)} ({factor_how(rope)}) multiplies cos and sin, so the rotary"
                        f" part of each score, q_R'·k_R', carries a² = {squared(factor)} (q_C·k_C does not turn)",
                        f"cos·a = {trig.plain_cos}·{trig.factor} = {ct} | sin·a = {trig.plain_sin}·{trig.factor} = {st}")
        if scaled_ok and trig.ok and agrees(calc, result) and agrees(pos * shown(theta_t), angle_t):
            break
    return text, details


# --- the worksheet's tables and answer key (the page's other latent tables: mla_sheet.py) ----------------

GUARD = 2  # the cos/sin table's extra decimals, so a turned cell is not off by their rounding


def sheet_tables(chain: PrintedChain, h: int) -> list[Table]:
    """The cos/sin table (once), the shared k_R' (once) and head h's q_R', turned from the printed tables."""
    sc, page = chain.sc, mla_sheet.Page(chain)
    mla = sc.mla
    assert mla is not None
    rope, positions = mla.rope, sc.positions
    assert rope is not None and positions is not None
    places = chain.d + GUARD
    turned = rope.pairs(mla.d_rope)
    if rope.scaling is None:  # as the page has always printed them: cos and sin of p·θᵢ
        angles = np.array([[p * rope.theta(i, mla.d_rope) for i in range(len(turned))] for p in positions])  # (n, r/2)
        cos, sin = round_to(np.cos(angles), places), round_to(np.sin(angles), places)  # (n, r/2) as printed
    else:  # DeepSeek's YaRN: the scaled angles p·θ'ᵢ, cos and sin times its attention factor a, as the heads turn
        turn = mla.rotation(positions).turn
        assert turn is not None
        cos, sin = round_to(turn.cos, places), round_to(turn.sin, places)
    on = "a·" if rope.attention_factor != 1.0 else ""
    mark = "'" if rope.scaling is not None else ""
    if h == 0:
        both = np.stack([cos, sin], axis=2).reshape(sc.n, 2 * len(turned))  # (n, r): cos, sin of pair 0, …
        cols = tuple(f"{on}{f} p·θ{mark}{parts.sub(i)}" for i in range(len(turned)) for f in ("cos", "sin"))
        what = f"{on}cos and {on}sin" if on else "cos and sin"
        page.add(Table("trig.mla", "cos/sin", f"{what} of each token's angle p·θ{mark}ᵢ", "mla_rotate", h, both,
                       sc.labels, cols, False, False, places=places),
                 Table("k_R", "k_R'", "k_R' = k_R turned by position (shared by every head)", "mla_rotate", h,
                       rope_rotate(page.values("k_R_raw"), cos, sin, turned, chain.page), sc.labels,
                       idx(mla.d_rope), False, True))
    page.add(Table(f"q_R.{h}", "q_R'", "q_R' = q_R turned by position", "mla_rotate", h,
                   rope_rotate(page.values(f"q_R_raw.{h}"), cos, sin, turned, chain.page), sc.labels,
                   idx(mla.d_rope), False, True))
    mla_sheet.joined(page, h, "q_R", "k_R", "mla_rotate")
    return page.mine


def sheet_line(cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    """A turned cell of k_R' or q_R' from the printed cos/sin table: ``k_R'[I,0] = k_R[I,0]·cos(1·θ₀) − …``."""
    sc, key, h = cells.sc, table.key.split(".")[0], table.head
    mla = sc.mla
    assert mla is not None and h is not None and key in ("k_R", "q_R")
    token = sc.labels[row]
    rope, positions = mla.rope, sc.positions
    assert rope is not None and positions is not None
    src = "k_R_raw" if key == "k_R" else f"q_R_raw.{h}"
    name = parts.shown_name(key)
    i, (a, b) = next((i, ab) for i, ab in enumerate(rope.pairs(mla.d_rope)) if col in ab)
    angle = f"{positions[row]}·θ{chr(39) if rope.scaling is not None else ''}{parts.sub(i)}"
    on = "a·" if rope.attention_factor != 1.0 else ""  # YaRN's attention factor, in the printed cos and sin
    cos, sin = cells.txt("trig.mla", row, 2 * i), cells.txt("trig.mla", row, 2 * i + 1)
    va, vb = cells.txt(src, row, a), cells.txt(src, row, b)
    s = name.removesuffix("'")
    if col == a:
        return (f"{name}[{token},{a}] = {s}[{token},{a}]·{on}cos({angle}) − {s}[{token},{b}]·{on}sin({angle})"
                f" = {va}·{cos} − {vb}·{sin} = {answer}")
    return (f"{name}[{token},{b}] = {s}[{token},{a}]·{on}sin({angle}) + {s}[{token},{b}]·{on}cos({angle})"
            f" = {va}·{sin} + {vb}·{cos} = {answer}")


@counts(SPEC)
def _cost(sc: Scenario, ph: Phase) -> Count:
    """Multiplies and adds only: the shared k_R of the new key rows turned once, each head's q_R."""
    from qkv_tui.core.cost import B, Count, fig, term

    mla = sc.mla
    assert mla is not None
    r, h = ("d_rope", mla.d_rope), ("h", mla.num_heads)
    return Count(SPEC.stage.key, SPEC.stage.name, ph.name,
                 read=fig(term("k_R", ph.NEW, r, B(ph)), term("q_R", ph.R, r, h, B(ph))),
                 written=fig(term("k_R'", ph.NEW, r, B(ph)), term("q_R'", ph.R, r, h, B(ph))))


def _turn_back(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int, grad: Matrix,
               value: float, name: str, src: str, refs: Callable[[int], Ref]) -> Operation:
    """One cell of a rotary gradient turned back by −p·θ: ``dq_R[t,0] = dq_R'[t,0]·cos + dq_R'[t,1]·sin``."""
    comp, mla = trace.comp, parts.mla_of(trace)
    turn = mla.rotation(comp.scenario.positions).turn
    assert turn is not None
    label = comp.scenario.labels[row]
    i, a, b = next((i, a, b) for i, (a, b) in enumerate(turn.pairs) if col in (a, b))
    cos, sin = float(turn.cos[row, i]), float(turn.sin[row, i])
    x, y = float(grad[row, a]), float(grad[row, b])
    assert mla.rope is not None
    on = "" if mla.rope.attention_factor == 1.0 else "a·"  # YaRN's factor is in the cos and sin turned back by
    if col == a:
        return formula_cell(trace, index, seg, row, col, d, value, lambda u, c, v, s: u * c + v * s, [x, cos, y, sin],
                            lambda t: f"{t[0]}·{t[1]} + {t[2]}·{t[3]}",
                            f"{name}[{label},{a}] = {src}[{label},{a}]·{on}cos + {src}[{label},{b}]·{on}sin",
                            (refs(a), refs(b)))
    return formula_cell(trace, index, seg, row, col, d, value, lambda v, c, u, s: v * c - u * s, [y, cos, x, sin],
                        lambda t: f"{t[0]}·{t[1]} − {t[2]}·{t[3]}",
                        f"{name}[{label},{b}] = {src}[{label},{b}]·{on}cos − {src}[{label},{a}]·{on}sin",
                        (refs(b), refs(a)))


class MlaRotateBack(BackwardSpec):
    """Each head's rotary query gradient turned back (its q_C part passes through unturned)."""

    stage = Stage("dmla_rotate", "dRotate",
                  "Back through RoPE, rotary parts only. dScore gave the gradient at q = [q_C | q_R']; its q_C columns"
                  " were never turned, so they pass on as they are, and each pair of q_R' turns back by −p·θ:"
                  " da = dq_R'[a]·cos + dq_R'[b]·sin, db = dq_R'[b]·cos − dq_R'[a]·sin (a rotation's transpose is the"
                  " opposite rotation). The shared k_R is turned back once, after every head has given its share.")
    per_head = True
    matrices = ("dq_R_back",)

    def runs(self, trace: TraceContext) -> bool:
        return mla_grads.runs(trace) and parts.mla_of(trace).rope is not None

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        return [Plan("dq_R_back", trace.comp.scenario.n, parts.mla_of(trace).d_rope)]

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        h = seg.head
        assert h is not None and col is not None
        back, nope = mla_grads.back_of(trace), parts.mla_of(trace).d_nope
        return _turn_back(trace, index, seg, row, col, d, back.dq_R[h], float(back.dq_R_raw[h][row, col]), "dq_R",
                          "dq_R'", lambda c: Ref("dQ_s", h, row, nope + c))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if head is None or not self.runs(trace):
            raise KeyError(name)
        return mla_grads.back_of(trace).dq_R_raw[head]

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        return [("dQ_s", op.head), ("q_R_raw", op.head), ("dq_R_back", op.head)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        return "dq_R = dq_R' turned back (−p·θ)"


BACKWARD = MlaRotateBack()


class SharedKeyBack(BackwardSpec):
    """The one rotary key every head read: its gradient is the sum of the heads' shares, then turned back."""

    stage = Stage("dk_r", "dk_R",
                  "The rotary key k_R is one matrix that every head read, beside its own k_C. So its gradient is the"
                  " SUM over the heads of each head's share, the k_R columns of that head's dK from dScore:"
                  " a weight read in several places collects the gradient from every place it was read.")
    matrices = ("dk_R_sum", "dk_R_back")

    def runs(self, trace: TraceContext) -> bool:
        return mla_grads.runs(trace)

    def meaning(self, trace: TraceContext, head: int | None) -> str:
        text = self.stage.meaning
        if parts.mla_of(trace).rope is not None:
            text += (" Then the sum is turned back by −p·θ, as each head's q_R was, to the gradient at"
                     f" {x_in(trace)[1]}·W_KR.")
        return text

    def segments(self, trace: TraceContext, head: int | None) -> list[Plan]:
        mla, n = parts.mla_of(trace), trace.comp.scenario.n
        plans = [Plan("dk_R_sum", n, mla.d_rope)]
        return plans + ([Plan("dk_R_back", n, mla.d_rope)] if mla.rope is not None else [])

    def operation(self, trace: TraceContext, index: int, seg: Segment, row: int, col: int | None, d: int) -> Operation:
        assert col is not None
        back, mla = mla_grads.back_of(trace), parts.mla_of(trace)
        turned = "'" if mla.rope is not None else ""
        label = trace.comp.scenario.labels[row]
        if seg.target == "dk_R_sum":
            H = len(trace.comp.heads)
            column = np.array([float(back.dk_R_heads[h][row, col]) for h in range(H)])
            cell = f"[{label},{mla.d_nope + col}]"
            said = f"dk_R{turned}[{label},{col}] = " + " + ".join(f"dK{cell} of head {h + 1}" for h in range(H))
            return sum_cell(trace, index, seg, row, col, d, float(back.dk_R[row, col]), column, said,
                            tuple(Ref("dK_s", h, row, mla.d_nope + col) for h in range(H)))
        return _turn_back(trace, index, seg, row, col, d, back.dk_R, float(back.dk_R_raw[row, col]), "dk_R", "dk_R'",
                          lambda c: Ref("dk_R_sum", None, row, c))

    def matrix(self, trace: TraceContext, name: str, head: int | None) -> Matrix:
        if not mla_grads.runs(trace):
            raise KeyError(name)
        back = mla_grads.back_of(trace)
        if name == "dk_R_back" and parts.mla_of(trace).rope is None:
            raise KeyError(name)
        return back.dk_R if name == "dk_R_sum" else back.dk_R_raw

    def panes(self, trace: TraceContext, op: Operation) -> list[Key]:
        if op.segment.target == "dk_R_sum":
            return [*[("dK_s", h) for h in range(min(len(trace.comp.heads), 2))], ("dk_R_sum", None)]
        return [("dk_R_sum", None), ("k_R_raw", None), ("dk_R_back", None)]

    def title(self, trace: TraceContext, name: str, head: int | None) -> str:
        turned = "'" if parts.mla_of(trace).rope is not None else ""
        return {"dk_R_sum": f"dk_R{turned} = Σ heads' shares", "dk_R_back": "dk_R = dk_R' turned back (−p·θ)"}[name]


KEY_BACKWARD = SharedKeyBack()
