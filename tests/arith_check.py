"""A calculator for the production views' lines, written apart from qkv_tui.teach.arith.

A line ``name = … = operands = result`` holds when the operands, evaluated exactly as printed,
give the result within one unit of its last digit. Annotations follow "; ".
"""

from __future__ import annotations

import math
import re

import numpy as np

NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?"


def _python(expr: str) -> str:
    text = expr.replace("ln(", "log(")
    text = text.replace("−∞", "(-inf)").replace("−", "-").replace("·", "*").replace("⊙", "*").replace("√", "sqrt")
    text = re.sub(r"sqrt(\d+)", r"sqrt(\1)", text)
    text = text.replace("e^", "exp")
    text = re.sub(r"exp(-?[\d.]+)", r"exp(\1)", text)
    text = re.sub(r"\[", "array([", text)
    return text.replace("]", "])")


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max())
    return e / e.sum()


SAFE = {"array": lambda items: np.array(items, dtype=float), "exp": np.exp, "sqrt": math.sqrt,
        "max": max, "inf": math.inf, "softmax": _softmax, "tanh": np.tanh, "log": np.log}


def evaluate(expr: str) -> float | np.ndarray | None:
    """The value of a printed expression, or None when it names symbols (Q[I], ℓ) rather than numbers."""
    words = expr.replace("softmax", "").replace("max", "").replace("tanh", "").replace("log", "").replace("ln", "")
    if not re.fullmatch(r"[\d.\s+\-−·⊙/()\[\],e^√∞]*", words.replace("−∞", "")):
        return None
    try:
        return eval(_python(expr), {"__builtins__": {}}, SAFE)
    except Exception:
        return None


def numbers(result: str) -> list[str] | None:
    text = result.strip()
    parts = text[1:-1].split(", ") if text.startswith("[") and text.endswith("]") else [text]
    return parts if all(re.fullmatch(NUMBER + "|−∞", p) for p in parts) else None


def unit(text: str) -> float:
    mantissa, _, exponent = text.lstrip("-").partition("e")
    return float(10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2])))


def check(line: str) -> bool | None:
    """True/False when the line's last step can be recomputed, None when it has none."""
    segment = line.split("; ")[0]
    sides = [s.strip() for s in segment.split(" = ")]
    if len(sides) < 3:
        return None
    shown = numbers(sides[-1])
    value = evaluate(sides[-2])
    if shown is None or value is None:
        return None
    values = np.atleast_1d(np.asarray(value, dtype=float))
    if values.size != len(shown):
        return False
    for got, text in zip(values, shown):
        want = -math.inf if text == "−∞" else float(text)
        if math.isinf(want) or math.isinf(got):
            if want != got:
                return False
        elif abs(got - want) > unit(text) * (1 + 1e-9):
            return False
    return True


def checked(lines: list[str]) -> tuple[int, list[str]]:
    """(lines recomputed, lines that fail)."""
    results = [(line, check(line)) for line in lines]
    return sum(r is not None for _, r in results), [line for line, r in results if r is False]
