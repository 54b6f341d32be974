"""The footer's rule: which keys a width has room for, and in which order they stand (no Textual).

Keys go whole or not at all, the least needed first: ``keep`` names the actions from most to least
needed, and the keys it does not name go before them, the last listed first. A key is named by its
whole call (``side('cache')``) or by its bare action (``app.quiz`` is ``quiz``, ``head(1)`` is ``head``).
"""

from __future__ import annotations

from collections.abc import Sequence


def rank(names: Sequence[str], call: str, position: int) -> int:
    """Where the key with this action call stands in ``names``; keys it does not name after them, by position."""
    name = call.partition("(")[0]
    bare = name.rpartition(".")[2]
    for action in (bare + call[len(name):], bare):  # a call named whole comes first
        if action in names:
            return names.index(action)
    return len(names) + position


def fit_keys(calls: Sequence[str], widths: Sequence[int], keep: Sequence[str], room: int) -> list[bool]:
    """For each key (its action call and the cells it takes), whether it is shown in ``room`` cells."""
    shown = [True] * len(calls)
    for i in sorted(range(len(calls)), key=lambda i: rank(keep, calls[i], i), reverse=True):
        if sum(width for width, on in zip(widths, shown) if on) <= room:
            break
        shown[i] = False
    return shown
