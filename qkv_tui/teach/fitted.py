"""Arithmetic lines that a calculator agrees with.

A line shows operands and a result. Rounded to the shown decimals, the operands of
``e^(0.577 − 2.887)`` no longer give the shown result: the student gets −2.310, not
−2.309. Here each line's operands get just enough extra digits that recomputing the line
from them, exactly as printed, lands within one unit of the result's last digit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from qkv_tui.core.fmt import NEG_INF, fmt, is_integral
from qkv_tui.core.scenario import Matrix

Operand = float | Matrix
EXTRA = 8  # the most digits a line's operands get beyond the result's


def unit(text: str) -> float:
    """One unit of the last digit of a number as printed: ``0.070`` → 0.001, ``2`` → 1, ``1.2e+08`` → 1e7."""
    text = text.strip("()[] ")
    if text in (NEG_INF, "∞", "nan"):
        return 0.0
    mantissa, _, exponent = text.lower().partition("e")
    digits = len(mantissa.partition(".")[2])
    return float(10.0 ** (int(exponent or 0) - digits))


def parse(text: str) -> float:
    """A number as printed back to a float (``−∞``, ``(-2)`` included)."""
    text = text.strip("() ")
    if text == NEG_INF:
        return -math.inf
    if text == "∞":
        return math.inf
    return float(text.replace("−", "-"))


def number(x: float, decimals: int, integral: bool = False) -> str:
    """One operand: whole numbers bare, negatives in parentheses (a product reads ``2·(-1)``)."""
    text = fmt(float(x), integral or float(x).is_integer(), decimals)
    return f"({text})" if text.startswith("-") else text


def row(values: Matrix, decimals: int, integral: bool = False) -> str:
    """``[1, 0, 1]`` when every entry is whole, else every entry to the same decimals."""
    return "[" + ", ".join(fmt(float(v), integral, decimals) for v in values) + "]"


def _show(value: Operand, decimals: int) -> str:
    if isinstance(value, np.ndarray):
        return row(value, decimals, is_integral(value))
    return number(value, decimals)


def _back(value: Operand, decimals: int) -> Operand:
    if isinstance(value, np.ndarray):
        whole = is_integral(value)
        return np.array([parse(fmt(float(v), whole, decimals)) for v in value])
    return parse(number(value, decimals))


def result_text(value: Operand, decimals: int, integral: bool = False) -> str:
    if isinstance(value, np.ndarray):
        return row(value, decimals, integral)
    return fmt(float(value), integral, decimals)


def agrees(shown: str, recomputed: Operand, exact: bool = False) -> bool:
    """True when ``recomputed`` is within one unit of the last digit of ``shown`` (a number or ``[...]``).

    ``exact``: a sum of numbers shown to the result's decimals must give it exactly, as a calculator does.
    """
    parts = shown.strip("[]").split(", ")
    values = np.atleast_1d(np.asarray(recomputed, dtype=float))
    if len(parts) != values.size:
        return False
    for text, got in zip(parts, values):
        want = parse(text)
        if math.isinf(want) or math.isinf(got):
            if want != got:
                return False
            continue
        # a hair under one unit, so float noise in the check can never tip a borderline line over
        if not abs(got - want) <= unit(text) * (1e-7 if exact else 0.99):
            return False
    return True


def fit(fn: Callable[..., Operand], operands: Sequence[Operand], result: Operand, decimals: int,
        integral: bool = False, plain_sum: bool = False) -> tuple[list[str], str]:
    """(operand texts, result text): operands with the fewest digits (at least ``decimals``) that recompute the result.

    ``fn`` recomputes the result from the operands as a calculator would (``math.exp`` for e^x).
    ``plain_sum``: the line only adds, so operands with the result's own decimals must add up to it exactly.
    """
    shown = result_text(result, decimals, integral)
    texts: list[str] = []
    with np.errstate(all="ignore"):
        for extra in range(EXTRA + 1):
            places = decimals + extra
            texts = [_show(v, places) for v in operands]
            if agrees(shown, fn(*(_back(v, places) for v in operands)), plain_sum and extra == 0):
                break
    return texts, shown
