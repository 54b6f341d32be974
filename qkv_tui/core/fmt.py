"""Numbers as a person writes them: integers bare, everything else to fixed decimals."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

NEG_INF = "−∞"
BIG = 1e6  # beyond this, fixed decimals get unreadable: switch to scientific


def is_integral(array: npt.NDArray[np.float64]) -> bool:
    """True when every finite entry is a whole number, so the matrix reads as integers."""
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return True
    return bool(np.all(finite == np.round(finite)) and np.all(np.abs(finite) < 1e15))


def fmt(x: float, integral: bool = False, decimals: int = 3) -> str:
    """One number: ``2``, ``0.707``, ``−∞``, ``1.235e+08``."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return NEG_INF if x < 0 else "∞"
    if integral and x == round(x) and abs(x) < 1e15:
        return str(int(x))
    if abs(x) >= BIG:
        return f"{x:.{decimals}e}"
    text = f"{x:.{decimals}f}"
    if text.lstrip("-").strip("0.") == "":  # "-0.000" reads as a sign error
        return text.lstrip("-")
    return text


def vector(values: Iterable[float], integral: bool = False, decimals: int = 3) -> str:
    """A row of numbers as written by hand: ``[1, 0, 1, 0]``, ``[0.070, 0.707, 0.223]``."""
    return "[" + ", ".join(fmt(float(v), integral, decimals) for v in values) + "]"


def operand(x: float, integral: bool = False, decimals: int = 3) -> str:
    """A number inside a product: negatives get parentheses, ``1·(-2)``."""
    text = fmt(x, integral, decimals)
    return f"({text})" if text.startswith("-") else text



def cell_len(text: str) -> int:
    """Terminal columns a label takes: CJK and emoji take two, combining marks none."""
    if text.isascii():
        return len(text)
    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width
