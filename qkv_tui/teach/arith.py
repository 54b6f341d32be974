"""Arithmetic lines that a student can redo on a calculator.

The rule every line keeps: each ``=`` recomputed from the numbers shown on its left
gives the number shown on its right within one unit of that number's last digit.

How the lines keep it:

- operands are shown at the chosen decimals, and every intermediate (a difference,
  an exponential, a row sum) is computed *from the operands as shown*, as a calculator
  would, then shown at the same decimals;
- the line's result is the exact value, the one in the pane;
- when the shown operands would miss that result by more than a unit (a long dot product,
  e^x of a rounded x), the operands get more digits, one at a time, until they do not
  (``guard`` digits; integers never need them).

By hand (``hand`` decimals set) intermediates are what the hand computation wrote down:
rounded products appear as their own step, ``0.12·0.35 + … = 0.042 + … = 0.117``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from qkv_tui.core.fmt import BIG, NEG_INF, fmt, operand
from qkv_tui.teach.handcalc import round_to

Numbers = Sequence[float] | npt.NDArray[np.float64]  # a row or column of a matrix, or a plain list

MAX_TERMS = 16  # longer sums are shown with an ellipsis (and cannot be redone from the page)
SHOWN_HEAD, SHOWN_TAIL = 6, 2
MAX_GUARD = 8  # extra digits an operand may get; float64 has no more to give


def shown(text: str) -> float:
    """The number a displayed text stands for: ``(-2.000)`` → -2.0, ``−∞`` → -inf."""
    t = text.strip("()")
    if t == NEG_INF:
        return -math.inf
    if t == "∞":
        return math.inf
    return float(t)


def unit(text: str) -> float:
    """One unit of a displayed number's last digit: ``2.887`` → 0.001, ``5`` → 1, ``1.2e+08`` → 1e7."""
    mantissa, _, exponent = text.strip("()").lstrip("-").partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def agrees(calculated: float, text: str) -> bool:
    """True when a recomputed value is within one unit of the last digit of the shown text."""
    value = shown(text)
    if math.isinf(value) or math.isinf(calculated) or math.isnan(calculated):
        return calculated == value
    return abs(calculated - value) <= unit(text) * (1 + 1e-9)


def elide(items: Sequence[str], sep: str) -> str:
    """Items joined by ``sep``; long runs keep their ends and say how many are hidden."""
    if len(items) > MAX_TERMS:
        hidden = len(items) - SHOWN_HEAD - SHOWN_TAIL
        items = [*items[:SHOWN_HEAD], f"… {hidden} more …", *items[-SHOWN_TAIL:]]
    return sep.join(items)


def _guards(*integral: bool) -> range:
    """Digits to try beyond the decimals: none when every operand is an integer."""
    return range(1) if all(integral) else range(MAX_GUARD + 1)


# --- dot products (Project, Score, Mix, W_O) ------------------------------------------


def _picked(n: int) -> list[int | None]:
    """Which terms a sum of n shows: all, or its ends around one ``None`` for the hidden middle."""
    if n <= MAX_TERMS:
        return list(range(n))
    return [*range(SHOWN_HEAD), None, *range(n - SHOWN_TAIL, n)]


def _join(n: int, item: Callable[[int], str], sep: str) -> str:
    hidden = n - SHOWN_HEAD - SHOWN_TAIL
    return sep.join(f"… {hidden} more …" if i is None else item(i) for i in _picked(n))


def _as_shown(x: Numbers, integral: bool, places: int) -> npt.NDArray[np.float64]:
    """What every entry reads as when shown at ``places`` (used where only a sum's ends are shown)."""
    values = np.asarray(x, dtype=float)
    if integral:
        return values
    out = round_to(values, places)
    big = np.abs(values) >= BIG  # written in scientific notation: rounded relative to the exponent
    # np.round scales by 10^places in binary, so near a tie it can round the other way from the
    # correctly rounded text a student would write; those few entries take the text's value
    scaled = np.where(big, 0.0, np.abs(values)) * 10.0**places  # big ones are handled by their text anyway
    near_tie = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
    for i in np.flatnonzero(big | near_tie):
        out[i] = shown(fmt(float(values[i]), False, places))
    return out


def dot_at(a: Numbers, b: Numbers, a_int: bool, b_int: bool, places: int,
           hand: int | None) -> tuple[list[str], float, bool]:
    """The sides ``1·1 + 0·0 …`` (and, by hand, the rounded products), their sum, and whether the
    products as shown give the rounded ones (always true when not by hand)."""
    n = len(a)
    if n <= MAX_TERMS:  # every operand is on the page: recompute from the very texts
        at = {i: operand(float(x), a_int, places) for i, x in enumerate(a)}
        bt = {i: operand(float(y), b_int, places) for i, y in enumerate(b)}
        products = np.array([shown(at[i]) * shown(bt[i]) for i in range(n)], dtype=float)
    else:  # a long sum shows only its ends; the middle is worked the same way, without the texts
        picked = [i for i in _picked(n) if i is not None]
        at, bt = {}, {}
        for i in picked:
            at[i], bt[i] = operand(float(a[i]), a_int, places), operand(float(b[i]), b_int, places)
        products = _as_shown(a, a_int, places) * _as_shown(b, b_int, places)
    sides = [_join(n, lambda i: f"{at[i]}·{bt[i]}", " + ")]
    if hand is None:
        return sides, math.fsum(products), True
    # what the hand computation wrote down: its own products (inputs are used as given), rounded
    rounded = round_to(np.asarray(a, dtype=float) * np.asarray(b, dtype=float), hand)
    if not np.array_equal(rounded, products):
        sides.append(_join(n, lambda i: operand(float(rounded[i]), False, hand), " + "))
    steps = bool(np.all(np.abs(products - rounded) <= 10.0 ** -hand * (1 + 1e-9)))
    return sides, math.fsum(rounded), steps


def dot_line(a: Numbers, b: Numbers, a_int: bool, b_int: bool, result: str,
             decimals: int, hand: int | None = None, places: int | None = None) -> str:
    """``1·1 + 0·0 + 1·1 = 2``: operands with the digits the result needs (or ``places`` of them)."""
    tries = [places] if places is not None else [decimals + g for g in _guards(a_int, b_int)]
    sides: list[str] = []
    for p in tries:
        sides, total, steps = dot_at(a, b, a_int, b_int, p, hand)
        if steps and agrees(total, result):
            break
    return " = ".join([*sides, result])


def dot_places(rows: Sequence[tuple[Numbers, Numbers, str]], a_int: bool, b_int: bool,
               decimals: int, hand: int | None = None) -> int:
    """The fewest places at which every dot product of a row checks out (one precision per row)."""
    p = decimals
    for g in _guards(a_int, b_int):
        p = decimals + g
        if all(_dot_ok(a, b, a_int, b_int, p, hand, result) for a, b, result in rows):
            return p
    return p


def _dot_ok(a: Numbers, b: Numbers, a_int: bool, b_int: bool, places: int, hand: int | None,
            result: str) -> bool:
    _, total, steps = dot_at(a, b, a_int, b_int, places, hand)
    return steps and agrees(total, result)


def vector_mix(weights: Numbers, V: npt.NDArray[np.float64], v_int: bool, results: Sequence[str],
               places: int, hand: int | None) -> str:
    """The seed's vector form, ``0.070·[1, 0, 1] + 0.707·[1, 2, 0] = [...]``; "" when it would not check out."""
    wt = [fmt(float(w), False, places) for w in weights]
    vt = [[fmt(float(x), v_int, places) for x in row] for row in V]
    for j, result in enumerate(results):
        products = [shown(w) * shown(row[j]) for w, row in zip(wt, vt)]
        if hand is not None and [float(v) for v in round_to(np.asarray(products, dtype=float), hand)] != products:
            return ""  # by hand each product is rounded first: the scalar lines show that step
        if not agrees(math.fsum(products), result):
            return ""
    terms = [f"{w}·[{', '.join(row)}]" for w, row in zip(wt, vt)]
    return f"{elide(terms, ' + ')} = [{', '.join(results)}]"


# --- division (Scale) --------------------------------------------------------------------


def quotient_line(numerator: float, num_int: bool, divisor: float, divisor_text: str | None, div_int: bool,
                  result: str, decimals: int) -> str:
    """``5 / √3 = 2.887``; ``divisor_text`` is a symbol such as ``√3``, else the divisor is shown as a number."""
    line = ""
    for g in _guards(num_int, divisor_text is not None or div_int):
        p = decimals + g
        nt = fmt(numerator, num_int, p)
        dt = divisor_text if divisor_text is not None else operand(divisor, div_int, p)
        line = f"{nt} / {dt} = {result}"
        if agrees(shown(nt) / (divisor if divisor_text is not None else shown(dt)), result):
            break
    return line


# --- softmax -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SoftmaxRow:
    """One row of the softmax as worked on paper, every number derived from the ones shown."""

    places: int  # decimals of everything but the weights
    scaled: tuple[str, ...]  # the row's inputs as shown (−∞ where masked)
    top: str  # the row max as shown
    shifted: tuple[str, ...]  # s − max, computed from the shown s and max
    exps: tuple[str, ...]  # e^(s − max) of the shown exponent ("0" where masked)
    total: str  # Σ of the shown exponentials; ≥ 1, since the max contributes e^0
    weights: tuple[str, ...]  # the exact weights at the chosen decimals
    plain: tuple[str, ...] | None  # e^s without the max, or None when it would over- or underflow
    plain_total: str | None


def softmax_row(masked: Numbers, weights: Numbers, decimals: int) -> SoftmaxRow:
    """The fewest places at which every weight of the row re-computes from the shown numbers."""
    finite = [float(s) for s in masked if not math.isinf(s)]
    row = SoftmaxRow(decimals, (), "", (), (), "", (), None, None)
    for g in range(MAX_GUARD + 1):
        row = _softmax_at(masked, weights, decimals, decimals + g, finite)
        if row.exps:  # the max-subtracted form checks out at these places
            return row
    return _softmax_at(masked, weights, decimals, decimals + MAX_GUARD, finite, force=True)


def _softmax_at(masked: Numbers, weights: Numbers, d: int, p: int, finite: list[float],
                force: bool = False) -> SoftmaxRow:
    scaled = tuple(NEG_INF if math.isinf(s) else fmt(float(s), False, p) for s in masked)
    top = fmt(max(finite), False, p)
    shifted = tuple(NEG_INF if t == NEG_INF else fmt(round(shown(t) - shown(top), p), False, p) for t in scaled)
    exps = tuple("0" if t == NEG_INF else fmt(math.exp(shown(t)), False, p) for t in shifted)
    total = fmt(math.fsum(shown(e) for e in exps), False, p)
    w = tuple(fmt(float(x), False, d) for x in weights)
    ok = all(
        agrees(shown(e) / shown(total), wt) and agrees(math.exp(shown(sh)) / shown(total), wt)
        for sh, e, wt in zip(shifted, exps, w) if sh != NEG_INF
    )
    if not ok and not force:
        return SoftmaxRow(p, (), "", (), (), "", (), None, None)
    plain: tuple[str, ...] | None = None
    plain_total: str | None = None
    if max(finite) <= 700:  # e^s itself must stay finite
        values = tuple("0" if t == NEG_INF else fmt(math.exp(shown(t)), False, p) for t in scaled)
        sum_text = fmt(math.fsum(shown(v) for v in values), False, p)
        if shown(sum_text) > 0 and all(
            agrees(shown(v) / shown(sum_text), wt) for v, wt, t in zip(values, w, scaled) if t != NEG_INF
        ):
            plain, plain_total = values, sum_text
    return SoftmaxRow(p, scaled, top, shifted, exps, total, w, plain, plain_total)
