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
  (``guard`` digits; integers never need them). :func:`first_fit` is that search, for the
  trace's own lines below and for :func:`fit`, which the cache and tiled views give any formula.

By hand (``hand`` decimals set) intermediates are what the hand computation wrote down:
rounded products appear as their own step, ``0.12·0.35 + … = 0.042 + … = 0.117``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from qkv_tui.base.fixed import fixed
from qkv_tui.core.fmt import BIG, NEG_INF, fmt, is_integral, operand, vector
from qkv_tui.core.scenario import Matrix
from qkv_tui.teach.handcalc import round_to

Numbers = Sequence[float] | Matrix  # a row or column of a matrix, or a plain list
Operand = float | Matrix  # what a view's formula takes: a number or a whole row
T = TypeVar("T")
P = TypeVar("P")  # what first_fit tries: decimal places, or (places, scientific)

MAX_TERMS = 16  # longer sums are shown with an ellipsis (and cannot be redone from the page)
SHOWN_HEAD, SHOWN_TAIL = 6, 2
MAX_GUARD = 8  # extra digits an operand may get; float64 has no more to give


# --- the rule ------------------------------------------------------------------------------


# the same few texts (``0.000``, a weight's digits) are read back hundreds of thousands of times on a
# 300-head page: each is parsed once
@functools.lru_cache(maxsize=1 << 16)
def shown(text: str) -> float:
    """The number a displayed text stands for: ``(-2.000)`` → -2.0, ``−∞`` → -inf."""
    t = text.strip("() ")
    if t == NEG_INF:
        return -math.inf
    if t == "∞":
        return math.inf
    return float(t.replace("−", "-"))


@functools.lru_cache(maxsize=1 << 16)
def unit(text: str) -> float:
    """One unit of a displayed number's last digit: ``2.887`` → 0.001, ``5`` → 1, ``1.2e+08`` → 1e7."""
    t = text.strip("()[] ")
    if t in (NEG_INF, "∞", "nan"):
        return 0.0
    mantissa, _, exponent = t.lower().partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def agrees(calculated: float | Numbers, text: str, exact: bool = False) -> bool:
    """True when a recomputed value is within one unit of the last digit of the shown text
    (a number, or a row ``[0.070, 0.707]`` against as many values).

    ``exact``: a plain sum of numbers shown to the result's decimals gives it exactly, as a calculator does.
    """
    if isinstance(calculated, float | int) and not text.startswith("["):  # one number: most lines
        return _within(float(calculated), text, exact)
    parts = text.strip("[]").split(", ")
    values = np.atleast_1d(np.asarray(calculated, dtype=float))
    return len(parts) == values.size and all(_within(float(v), t, exact) for v, t in zip(values, parts))


@functools.lru_cache(maxsize=1 << 16)
def _reading(text: str) -> tuple[float, float]:
    """(the number a shown text stands for, one unit of its last digit): one lookup for both."""
    return shown(text), unit(text)


def _within(calculated: float, text: str, exact: bool) -> bool:
    value, one = _reading(text)
    if not (math.isfinite(value) and math.isfinite(calculated)):
        return calculated == value
    # one whole unit is the rule (0.19 + 0.51 = 0.70 reads as 0.69); the 1e-9 of a unit only absorbs float
    # noise, so the trace and the views stop at the same digits for the same numbers
    return abs(calculated - value) <= one * (1e-7 if exact else 1 + 1e-9)


def float_sum(terms: Iterable[float]) -> float:
    """The exact sum of finite terms, rounded once (math.fsum); where an infinity meets its opposite, or the sum
    is past float64's range, what float arithmetic gives (nan, ±inf) where math.fsum would raise."""
    values = [float(t) for t in terms]
    try:
        return math.fsum(values)
    except (ValueError, OverflowError):
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.sum(np.array(values, dtype=float)))


def tries(decimals: int, *integral: bool) -> range:
    """Decimals to try: the shown ones, then guard digits (none when every operand is whole)."""
    return range(decimals, decimals + 1) if all(integral) else range(decimals, decimals + MAX_GUARD + 1)


def first_fit(candidates: Iterable[P], attempt: Callable[[P], tuple[T, bool]]) -> T:
    """What ``attempt`` builds at the first places that check out; failing all, at the last (the most
    digits float64 can give, the closest a page can come)."""
    built: T | None = None
    for p in candidates:
        built, ok = attempt(p)
        if ok:
            break
    assert built is not None, "no places to try"
    return built


# --- any formula (the cache and tiled views) ------------------------------------------------


def fit(fn: Callable[..., Operand], operands: Sequence[Operand], result: Operand, decimals: int,
        integral: bool = False, plain_sum: bool = False) -> tuple[list[str], str]:
    """(operand texts, result text): operands with the fewest digits that recompute the result.

    ``fn`` recomputes the result from the operands as a calculator would (``math.exp`` for e^x).
    ``plain_sum``: the line only adds, so operands at the result's own decimals must give it exactly.
    """
    result_text = (vector(result, integral, decimals) if isinstance(result, np.ndarray)
                   else fmt(float(result), integral, decimals))

    def attempt(form: tuple[int, bool]) -> tuple[list[str], bool]:
        p, scientific = form
        texts = [_text(v, p, scientific) for v in operands]
        with np.errstate(all="ignore"):  # a formula may meet −∞ (a masked score): its value is the check
            try:
                calculated = fn(*(_value(v, t) for v, t in zip(operands, texts)))
            except (ZeroDivisionError, OverflowError, ValueError):  # a divisor of 0.001 shown as 0.0: more digits
                return texts, False
        return texts, agrees(calculated, result_text, plain_sum and p == decimals and not scientific)

    whole = [_whole(v) for v in operands]
    forms = [(p, False) for p in tries(decimals, *whole)]
    if not all(whole):  # then significant digits, as quotient_line does: a divisor of 1e-12 reads 0 at fixed places
        forms += [(p, True) for p in range(decimals, SIGNIFICANT)]
    return first_fit(forms, attempt), result_text


def _whole(value: Operand) -> bool:
    """True when guard digits cannot change how an operand reads: whole numbers are shown bare."""
    if isinstance(value, np.ndarray):
        return is_integral(value)
    return float(value).is_integer() and abs(float(value)) < 1e15  # fmt's bound for writing it bare


def _text(value: Operand, p: int, scientific: bool = False) -> str:
    """A number whole when it is whole (``2·(-1)``), a row ``[1, 0, 1]`` whole when all of it is."""
    if isinstance(value, np.ndarray):
        if not scientific:
            return vector(value, is_integral(value), p)
        integral = is_integral(value)
        return "[" + ", ".join(significant(float(x), integral, p, True) for x in value) + "]"
    text = significant(float(value), float(value).is_integer(), p, scientific)
    return f"({text})" if text.startswith("-") else text


def _value(value: Operand, text: str) -> Operand:
    """An operand as its text reads."""
    if isinstance(value, np.ndarray):
        return np.array([shown(t) for t in text[1:-1].split(", ") if t])
    return shown(text)


# --- dot products (Project, Score, Mix, W_O) ------------------------------------------


def _picked(n: int) -> list[int | None]:
    """Which terms a sum of n shows: all, or its ends around one ``None`` for the hidden middle."""
    if n <= MAX_TERMS:
        return list(range(n))
    return [*range(SHOWN_HEAD), None, *range(n - SHOWN_TAIL, n)]


def _join(n: int, item: Callable[[int], str], sep: str, hidden_sum: str | None = None) -> str:
    hidden = n - SHOWN_HEAD - SHOWN_TAIL
    gap = f"… {hidden} more …" if hidden_sum is None else f"… {hidden} more, Σ = {hidden_sum} …"
    return sep.join(gap if i is None else item(i) for i in _picked(n))


def hidden_terms(n: int) -> range:
    """The terms of a sum of n that a line leaves out (none when all n are shown)."""
    return range(SHOWN_HEAD, n - SHOWN_TAIL) if n > MAX_TERMS else range(0)


def elide(items: Sequence[str], sep: str, hidden_sum: str | None = None) -> str:
    """Items joined by ``sep``; long runs keep their ends and say how many are hidden (and, given
    ``hidden_sum``, what the hidden ones add up to, so the line can still be redone)."""
    return _join(len(items), items.__getitem__, sep, hidden_sum)


def _as_shown(x: Numbers, integral: bool, places: int) -> Matrix:
    """What every entry reads as when shown at ``places`` (used where only a sum's ends are shown)."""
    values = np.asarray(x, dtype=float)
    if integral:
        return values
    out = round_to(values, places)  # as the text reads, ties included
    big = np.abs(values) >= BIG  # written in scientific notation: rounded relative to the exponent
    for i in np.flatnonzero(big):
        out[i] = shown(fmt(float(values[i]), False, places))
    return out


@functools.lru_cache(maxsize=1 << 16)
def _operand_read(x: float, integral: bool, places: int, tiny: bool = False) -> tuple[str, float]:
    """An operand's text and the number it reads as. A 300-head page writes the same inputs (X's rows, a
    weight for every worked row) tens of thousands of times: each is written and read once.

    ``tiny``: a number that reads as 0 at these places is written by its mantissa instead (``1.000e-300``),
    where a product with a huge one is what the result holds (1e-300·1e300 = 1, not 0·1e300)."""
    if tiny and x != 0 and math.isfinite(x) and not integral and shown(fmt(x, False, places)) == 0:
        text = significant(float(x), False, places, True)
        text = f"({text})" if text.startswith("-") else text
    else:
        text = operand(float(x), integral, places)
    return text, shown(text)


def tiny_operand(x: float, integral: bool, places: int) -> str:
    """``operand``, but a number that reads as 0 at these places written by its mantissa (``1.000e-300``)."""
    return _operand_read(float(x), integral, places, True)[0]


def dot_at(a: Numbers, b: Numbers, a_int: bool, b_int: bool, places: int,
           hand: int | None, tiny: bool = False) -> tuple[list[str], float, bool]:
    """The sides ``1·1 + 0·0 …`` (and, by hand, the rounded products), their sum, and whether the
    products as shown give the rounded ones (always true when not by hand).

    An operand near float64's largest reads as one past it (1.80e308 is ∞), and ∞·0 is NaN: such a sum is
    what the page's texts give, and the check against the result then asks for more digits."""
    n = len(a)
    if n <= MAX_TERMS:  # every operand is on the page: recompute from the very texts
        # plain floats: a product past float64 is ∞ without a NumPy warning, as on a calculator
        pa = [_operand_read(x, a_int, places, tiny) for x in (a.tolist() if isinstance(a, np.ndarray) else a)]
        pb = [_operand_read(y, b_int, places, tiny) for y in (b.tolist() if isinstance(b, np.ndarray) else b)]
        sides = [" + ".join(f"{ta}·{tb}" for (ta, _), (tb, _) in zip(pa, pb))]
        terms = [x * y for (_, x), (_, y) in zip(pa, pb)]
        if hand is None:
            return sides, float_sum(terms), True
        products = np.array(terms, dtype=float)
    else:  # a long sum shows only its ends; the middle is worked the same way, without the texts
        at, bt = {}, {}
        for i in _picked(n):
            if i is not None:
                at[i], bt[i] = operand(float(a[i]), a_int, places), operand(float(b[i]), b_int, places)
        with np.errstate(over="ignore", invalid="ignore"):
            products = _as_shown(a, a_int, places) * _as_shown(b, b_int, places)
        sides = [_join(n, lambda i: f"{at[i]}·{bt[i]}", " + ")]
        if hand is None:
            return sides, float_sum(products.tolist()), True
    # what the hand computation wrote down: its own products (inputs are used as given), rounded
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = round_to(np.asarray(a, dtype=float) * np.asarray(b, dtype=float), hand)
        if not np.array_equal(rounded, products):
            sides.append(_join(n, lambda i: operand(float(rounded[i]), False, hand), " + "))
        steps = bool(np.all(np.abs(products - rounded) <= 10.0 ** -hand * (1 + 1e-9)))
    return sides, float_sum(rounded.tolist()), steps



def _dot(a: Numbers, b: Numbers, a_int: bool, b_int: bool, result: str, places: int,
         hand: int | None, tiny: bool = False) -> tuple[list[str], bool]:
    """The sides at ``places``, and whether they check out against the result."""
    sides, total, steps = dot_at(a, b, a_int, b_int, places, hand, tiny)
    return sides, steps and agrees(total, result)


def dot_line(a: Numbers, b: Numbers, a_int: bool, b_int: bool, result: str,
             decimals: int, hand: int | None = None, places: int | None = None) -> str:
    """``1·1 + 0·0 + 1·1 = 2``: operands with the digits the result needs (or ``places`` of them).

    Where no places check out because an operand too small for any of them meets a huge one, the small
    ones are written by their mantissas and the places tried again."""
    candidates = [places] if places is not None else list(tries(decimals, a_int, b_int))
    for p in candidates:
        sides, ok = _dot(a, b, a_int, b_int, result, p, hand)
        if ok:
            return " = ".join([*sides, result])
    if len(a) <= MAX_TERMS:
        sides = first_fit(candidates, lambda p: _dot(a, b, a_int, b_int, result, p, hand, tiny=True))
    return " = ".join([*sides, result])


def dot_places(rows: Sequence[tuple[Numbers, Numbers, str]], a_int: bool, b_int: bool,
               decimals: int, hand: int | None = None) -> int:
    """The fewest places at which every dot product of a row checks out (one precision per row)."""
    return first_fit(tries(decimals, a_int, b_int),
                     lambda p: (p, all(_dot(a, b, a_int, b_int, result, p, hand)[1] for a, b, result in rows)))


def vector_mix(weights: Numbers, V: Matrix, v_int: bool, results: Sequence[str],
               places: int, hand: int | None) -> str:
    """The seed's vector form, ``0.070·[1, 0, 1] + 0.707·[1, 2, 0] = [...]``; "" when it would not check out."""
    wt = [fmt(float(w), False, places) for w in weights]
    vt = [[fmt(float(x), v_int, places) for x in row] for row in V]
    for j, result in enumerate(results):
        products = [shown(w) * shown(row[j]) for w, row in zip(wt, vt)]
        if hand is not None and [float(v) for v in round_to(np.asarray(products, dtype=float), hand)] != products:
            return ""  # by hand each product is rounded first: the scalar lines show that step
        if not agrees(float_sum(products), result):
            return ""
    terms = [f"{w}·[{', '.join(row)}]" for w, row in zip(wt, vt)]
    return f"{elide(terms, ' + ')} = [{', '.join(results)}]"


# --- division (Scale) --------------------------------------------------------------------


def quotient_line(numerator: float, num_int: bool, divisor: float, divisor_text: str | None, div_int: bool,
                  result: str, decimals: int) -> str:
    """``5 / √3 = 2.887``; ``divisor_text`` is a symbol such as ``√3``, else the divisor is shown as a number.

    A quotient keeps its operands' *relative* precision: a scale of 0.0001 at three decimals would read
    0.000, and a score of 3e-12 over a scale of 1e-12 needs digits no fixed decimals give. So after the
    fixed decimals (with their guard digits) come the same operands in scientific notation, as many
    significant digits as it takes (at most float64's 17): ``3.000e-12 / 1.000e-12 = 3.000``.
    """

    def attempt(form: tuple[int, bool]) -> tuple[str, bool]:
        p, scientific = form
        nt = significant(numerator, num_int, p, scientific)
        dt = divisor_text if divisor_text is not None else significant(divisor, div_int, p, scientific)
        value = divisor if divisor_text is not None else shown(dt)
        line = f"{nt} / {dt if not dt.startswith('-') else f'({dt})'} = {result}"
        if value == 0:  # a divisor too small for these places reads 0: not a line anyone can redo
            return line, False
        return line, agrees(shown(nt) / value, result)

    whole = num_int and (divisor_text is not None or div_int)
    forms = [(p, False) for p in tries(decimals, whole)]
    if not whole:
        forms += [(p, True) for p in range(decimals, SIGNIFICANT)]
    return first_fit(forms, attempt)


SIGNIFICANT = 17  # decimals of a mantissa that float64 can fill: 16 after the point, so 17 digits


def significant(x: float, integral: bool, p: int, scientific: bool) -> str:
    """A number at ``p`` places: fixed decimals as :func:`fmt` writes them, or with ``scientific`` its
    mantissa to ``p`` decimals (``1.000e-04``), where relative precision is what matters (a divisor).
    Whole numbers stay bare either way."""
    if not scientific or x == 0 or (integral and float(x).is_integer() and abs(x) < 1e15):
        return fmt(x, integral, p)
    return f"{x:.{p}e}"


# --- softmax -----------------------------------------------------------------------------


@fixed
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
    # logits of 1e12 (a tiny scale) are written 1.000e+12: their differences need up to float64's 16 mantissa
    # decimals, past the usual guard digits
    places = range(decimals, max(decimals + MAX_GUARD, SIGNIFICANT - 1) + 1)
    return first_fit(places, lambda p: _softmax_at(masked, weights, decimals, p, finite))


def _softmax_at(masked: Numbers, weights: Numbers, d: int, p: int, finite: list[float]) -> tuple[SoftmaxRow, bool]:
    """The row worked at ``p`` places, and whether its max-subtracted form checks out."""
    scaled = tuple(NEG_INF if math.isinf(s) else fmt(float(s), False, p) for s in masked)
    top = fmt(max(finite), False, p)
    shifted = tuple(NEG_INF if t == NEG_INF else fmt(round(shown(t) - shown(top), p), False, p) for t in scaled)
    exps = tuple("0" if t == NEG_INF else fmt(math.exp(shown(t)), False, p) for t in shifted)
    total = fmt(float_sum([shown(e) for e in exps]), False, p)
    w = tuple(fmt(float(x), False, d) for x in weights)
    ok = all(
        agrees(shown(e) / shown(total), wt) and agrees(math.exp(shown(sh)) / shown(total), wt)
        for sh, e, wt in zip(shifted, exps, w) if sh != NEG_INF
    )
    plain: tuple[str, ...] | None = None
    plain_total: str | None = None
    if max(finite) <= 700:  # e^s itself must stay finite
        values = tuple("0" if t == NEG_INF else fmt(math.exp(shown(t)), False, p) for t in scaled)
        sum_text = fmt(float_sum([shown(v) for v in values]), False, p)
        if shown(sum_text) > 0 and all(
            agrees(shown(v) / shown(sum_text), wt) for v, wt, t in zip(values, w, scaled) if t != NEG_INF
        ):
            plain, plain_total = values, sum_text
    return SoftmaxRow(p, scaled, top, shifted, exps, total, w, plain, plain_total), ok
