"""What a view asks the parts of a head (contracts §14, issue 30): a part record may refuse a view in one line.

A record says so by a ``refuses`` mapping, a view's name ("tiles", "cache") to the line that says why; a view
that finds one shows that line instead of numbers it would get wrong. No view tests for a variant by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from qkv_tui.core.head import HeadResult


def refusal(heads: Iterable[HeadResult], view: str) -> str | None:
    """The first line in which a part of one of ``heads`` refuses ``view``; None where every part can be shown."""
    for hr in heads:
        for record in hr.parts.values():
            said: Mapping[str, str] = getattr(record, "refuses", {})
            if view in said:
                return said[view]
    return None


def row_total(hr: HeadResult) -> float:
    """What each row of a head's map adds up to, as its parts say (differential attention: 1 − λ); 1 where no part
    changes it (a sink's share aside, which the softmax keeps in ``row_sum``)."""
    for record in hr.parts.values():
        total = getattr(record, "row_total", None)
        if total is not None:
            return float(total)
    return 1.0
