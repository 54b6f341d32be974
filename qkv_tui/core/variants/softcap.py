"""Soft-capped logits (Gemma 2): ``softcap`` at the top level for every head, in a ``[[heads]]`` table for that
head, or in ``[attention]``; the scaled scores become softcap·tanh(scaled / softcap) before the bias and the
mask (docs/scenario-format.md, "softcap")."""

from __future__ import annotations

import math
from typing import Any

from qkv_tui.base.values import kind as _kind
from qkv_tui.base.values import show as _show
from qkv_tui.core.variants.common import Checker, Features, Keys

KEY = "softcap"  # the same key at the top level, in [[heads]] and in [attention]


def parse_softcap(v: Checker, table: dict[str, Any], where: str, inherited: float | None = None) -> float | None:
    """A table's own ``softcap`` (finite, > 0), or the one it inherits from the top level."""
    if KEY not in table:
        return inherited
    value = table[KEY]
    key = f"{where} {KEY}" if where else KEY
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise v.fail(f"{key} must be a number > 0 (the cap c in c·tanh(s/c)), got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise v.fail(f"{key} is {_show(value)}, too large; expected a finite number > 0") from None
    if not math.isfinite(number) or number <= 0:
        raise v.fail(f"{key} = {_show(value)}; expected a finite number > 0 (the cap c in c·tanh(s/c))")
    return number


def caps_of(sc: Features) -> list[float | None]:
    return [getattr(h, "softcap", None) for h in sc.heads]


def summary_parts(sc: Features) -> list[str]:
    caps = [c for c in caps_of(sc) if c is not None]
    if not caps:
        return []
    return [f"softcap {'/'.join(f'{c:g}' for c in dict.fromkeys(caps))}"]


KEYS = Keys(summary_parts)
