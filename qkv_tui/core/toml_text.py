"""How a value is written in a scenario file: the TOML export's own rules, kept in the core so that
each variant table can write itself back (the edges build the rest of the file with them).

Floats are written with ``repr`` (the shortest text that reads back to the same float64), so
loading the export gives bit-for-bit the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def number(value: float) -> str:
    """A finite float as TOML: whole numbers without ".0" (hand-made files read as written), the rest exactly."""
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{v} cannot be written to a scenario file")
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def string(text: str) -> str:
    """A TOML basic string."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def vector(values: Iterable[float]) -> str:
    return "[" + ", ".join(number(v) for v in values) + "]"
