"""Projection biases: ``b_Q``, ``b_K``, ``b_V`` in ``[[heads]]`` or ``[attention]``, ``b_O`` in ``[output]``
(docs/scenario-format.md)."""

from __future__ import annotations

from typing import Any

from qkv_tui.core.arrays import Vector
from qkv_tui.core.variants.common import Checker, Features, Keys, numbers

HEAD_KEYS = ("b_Q", "b_K", "b_V")  # in [[heads]] and in [attention]
OUTPUT_KEYS = ("b_O",)


def parse_bias(v: Checker, table: dict[str, Any], role: str, where: str, width: int, what: str) -> Vector | None:
    """``b_Q``, ``b_K``, ``b_V`` or ``b_O``: one number per column of its projection."""
    key = f"b_{role}"
    if key not in table:
        return None
    return numbers(v, table[key], f"{where} {key}", width, what)


def summary_parts(sc: Features) -> list[str]:
    if any(h.b_Q is not None or h.b_K is not None or h.b_V is not None for h in sc.heads) or sc.b_O is not None:
        return ["biases"]
    return []


KEYS = Keys(summary_parts)
