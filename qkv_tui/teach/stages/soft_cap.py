"""The Scale stage's soft-cap (Gemma 2): capped = c·tanh(scaled / c) per cell, before ALiBi's bias and the mask.

Its own operation per cell, after the cell's division, so a learner sees the scaled score and then what the
cap makes of it: ``capped[I,love] = 50·tanh(1.414/50) = 50·tanh(0.02828) = 1.414``. The tanh is the kernels'
(kernels/softmax.py, soft_cap); the lines here redo it on the numbers as shown, as a calculator would.
"""

from __future__ import annotations

import math

import numpy as np

from qkv_tui.core import part_questions as ask
from qkv_tui.core.engine import HeadResult
from qkv_tui.core.fmt import NEG_INF, fmt, operand
from qkv_tui.core.scenario import Matrix
from qkv_tui.kernels.softmax import masked_logits
from qkv_tui.teach.arith import MAX_GUARD, SIGNIFICANT, agrees, shown, significant
from qkv_tui.teach.stages import loaded
from qkv_tui.teach.stages.common import Operation, Ref, Segment, hround
from qkv_tui.teach.stages.context import TraceContext
from qkv_tui.teach.stages.printed import PrintedCells, PrintedChain, Table, exact
from qkv_tui.teach.stages.terms import adds_term, term_lines


def pull_note(scaled: float, capped: float, cap: float, d: int) -> str:
    """How much of the score the cap keeps: nearly all far below c, less and less towards ±c."""
    c = cap_text(cap)
    s_t = fmt(scaled, False, d)
    if scaled == 0:
        return f"tanh(0) = 0: a zero score stays 0 under any cap (c·tanh(s/c) stays within ±{c})"
    kept = capped / scaled
    return (f"the cap keeps {kept:.0%} of {s_t}: c·tanh(s/c) stays within ±{c}, and the larger |s| is next to {c},"
            " the more it is pulled in")  # past ±c too: "nearer to ±c" would stop there


def cap_text(cap: float) -> str:
    """The cap as the scenario gives it: ``50``, ``30.5``."""
    return exact(cap)


def has_cap(trace: TraceContext, head: int | None) -> bool:
    return head is not None and loaded.capped(trace.comp.heads[head]) is not None


def _u_forms(p: int) -> list[tuple[int, bool]]:
    """Decimals for s/c: the fixed ones (a cap of 50 needs two more than the score), then scientific."""
    return [(q, False) for q in range(p, p + MAX_GUARD + 4)] + [(q, True) for q in range(p, SIGNIFICANT)]


def capped_line(scaled: float, cap: float, result: str, d: int, hand: int | None,
                bias: tuple[float, float, str] | None = None) -> str:
    """``50·tanh(1.414/50) = 50·tanh(0.02828) = 1.414``, with a part's term after it where ``bias`` is (its value,
    its value redone from the operands its text shows, its text: ALiBi's ``0.25·(1 − 2)``).

    The score is shown at the line's places (by hand: as written down), s/c with the digits the cap's
    factor needs, and every ``=`` redoes on a calculator from the numbers on its left."""
    c_t = cap_text(cap)
    c = shown(c_t)
    places = range(d, d + 1) if hand is not None else range(d, d + MAX_GUARD + 1)
    line = ""
    for p in places:
        s_t = fmt(scaled, False, p)
        u = shown(s_t) / c
        capped = c * math.tanh(u)  # from the shown score: the hand value, or the exact one to these places
        cap_t = fmt(capped if hand is None else hround(capped, hand), False, p)
        if bias is None:
            score_ok = agrees(capped, result)
        else:
            value, redone, term = bias
            bias_t = fmt(value, False, p)
            total = shown(cap_t) + shown(bias_t)
            sums = abs(total - shown(result)) < 1e-9 * max(1.0, abs(total)) if p == d else agrees(total, result)
            score_ok = sums and agrees(redone, bias_t) and agrees(capped + redone, result)
        for q, scientific in _u_forms(p):
            u_t = significant(u, False, q, scientific)
            if bias is None:
                line = f"{c_t}·tanh({s_t}/{c_t}) = {c_t}·tanh({u_t}) = {result}"
            else:
                line = (f"{c_t}·tanh({s_t}/{c_t}) + {term} = {c_t}·tanh({u_t}) + {operand(value, False, p)}"
                        f" = {operand(shown(cap_t), False, p)} + {operand(value, False, p)} = {result}")
            if agrees(u, u_t) and agrees(c * math.tanh(shown(u_t)), cap_t if bias is not None else result):
                break  # s/c has the digits the cap's factor needs
        if score_ok or hand is not None:
            return line
    return line


def capped_operation(trace: TraceContext, index: int, seg: Segment, row: int, col: int, d: int,
                     reason: str | None) -> Operation:
    """One cell of the capped scores: c·tanh(scaled / c), then ALiBi's bias, then the mask (``reason``: why the
    mask forbids the cell, in the Scale stage's words; None where it allows it)."""
    h = seg.head
    assert h is not None
    comp, sc = trace.comp, trace.comp.scenario
    hr = comp.heads[h]
    assert loaded.capped(hr) is not None
    q, k = sc.labels[row], sc.key_labels[col]
    allowed = bool(comp.allow[row, col])
    bias = None
    extra: tuple[str, ...] = ()
    logit = float(loaded.need_capped(hr).capped[row, col])
    lines = term_lines([hr])
    if lines is not None and sc.positions is not None:
        bias, said = lines.capped_term(hr, sc.positions, row, col)
        value = bias[0]
        logit = float(hr.masked[row, col]) if allowed else logit + value
        if not allowed and trace.hand is not None:
            logit = hround(logit, trace.hand)
        extra = (f"{said} = {fmt(value, False, d)}",)
    cap = loaded.need_capped(hr)
    text = f"capped[{q},{k}] = " + capped_line(float(hr.scaled[row, col]), cap.softcap, fmt(logit, False, d), d,
                                               trace.hand, bias)
    details: tuple[str, ...] = (pull_note(float(hr.scaled[row, col]), float(cap.capped[row, col]), cap.softcap, d),)
    if reason is not None:
        text += f", masked → {NEG_INF}"
        details = (reason, *details)
    operands: tuple[Ref, ...] = (Ref("scaled", h, row, col),)
    if ask.term_name(hr) is not None:
        operands += (Ref("bias", h, row, col),)
    return Operation(index, seg, row, col, float(hr.masked[row, col]), operands, text, extra + details)


def capped_title(trace: TraceContext, hr: HeadResult, masked: str) -> str:
    assert loaded.capped(hr) is not None
    c = cap_text(loaded.need_capped(hr).softcap)
    bias = " + bias" if adds_term(trace.comp.heads) else ""
    return f"capped = {c}·tanh(scaled/{c}){bias}{masked}"


def meaning(heads: list[HeadResult]) -> str:
    """The soft-cap's sentence of the Scale stage, for one head or (the Markdown page) for every head."""
    capped = [hr for hr in heads if loaded.capped(hr) is not None]
    if not capped:
        return ""
    caps = list(dict.fromkeys(cap_text(loaded.need_capped(hr).softcap) for hr in capped if loaded.capped(hr) is not None))
    c = caps[0] if len(caps) == 1 else "c"
    whose = f"{capped[0].name}'s soft-cap" if len(heads) == 1 else "the soft-cap"
    if len(capped) < len(heads) or len(caps) > 1:  # heads with caps of their own, or none
        whose += " (" + ", ".join(f"{hr.name}: c = {cap_text(loaded.need_capped(hr).softcap)}" for hr in capped) + ")"
    return (f" Then {whose} turns each scaled score s into {c}·tanh(s/{c}), before any bias and the mask:"
            f" no logit passes ±{c}, so none can run away, and a score much smaller than {c} in size stays almost as it"
            " was"  # not "far below c": a score of −10c is far below c and is pulled right in to −c
            " (Gemma 2 caps at 50; Gemma 3 replaced the cap by QK-norm).")


# --- the worksheet -----------------------------------------------------------------------------


def worksheet_tables(chain: PrintedChain, h: int, quotient: Matrix, terms: Matrix | None, added: str,
                     divisor: str) -> list[Table]:
    """The printed ``scaled`` table (scores / scale, no mask yet), then ``capped`` worked from it."""
    sc, page = chain.sc, chain.page
    hr = chain.comp.heads[h]
    assert loaded.capped(hr) is not None
    from qkv_tui.kernels.softcap import soft_cap  # where used: only a capped head's page gets here
    everywhere = np.ones_like(sc.allow)
    printed = page.table(quotient)  # (n, m) scores / scale, as printed
    capped = soft_cap(printed, loaded.need_capped(hr).softcap, page)  # (n, m) from the printed scaled table
    logits = masked_logits(capped, sc.allow, terms, page)  # (n, m) + a part's term (``added``), −∞ where masked
    c = cap_text(loaded.need_capped(hr).softcap)
    return [
        Table(f"scaled.{h}", "scaled", f"scaled = scores / {divisor}", "scale", h, printed, sc.labels, sc.key_labels,
              False, True, everywhere),
        Table(f"capped.{h}", "capped", f"capped = {c}·tanh(scaled / {c}){added}", "scale", h, logits, sc.labels,
              sc.key_labels, False, True, sc.allow),
    ]


def worksheet_line(cells: PrintedCells, table: Table, row: int, col: int, answer: str) -> str:
    h = table.head
    assert h is not None
    sc = cells.sc
    q, k = sc.labels[row], sc.key_labels[col]
    cap = sc.heads[h].softcap
    assert cap is not None
    c = cap_text(cap)
    scaled = shown(cells.txt(f"scaled.{h}", row, col))  # as printed: the line starts from the page's number
    lines = term_lines(cells.comp.heads)
    printed = None if lines is None else lines.printed_capped_term(cells, h, row, col)
    if printed is None:
        return f"capped[{q},{k}] = {c}·tanh(scaled[{q},{k}] / {c}) = " + capped_line(scaled, cap, answer, cells.d, None)
    bias, added = printed
    return (f"capped[{q},{k}] = {c}·tanh(scaled[{q},{k}] / {c}){added} = "
            + capped_line(scaled, cap, answer, cells.d, None, bias))
