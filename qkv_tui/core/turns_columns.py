"""Which of a scenario's tables turns another part's vectors by position (the DSA indexer's q_I and k_I), asked by
what it answers, not by its name: the first table with a ``columns_turn(width, layout)`` (kernels/rope.py columns),
or, where none sits in the scenario itself, the first such table a table keeps as one of its own fields (a table
that builds the heads keeps the one that turns them: [mla] its [rope])."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any

from qkv_tui.core import part_questions as ask
from qkv_tui.core.scenario import Scenario


def _held(table: object) -> Iterator[object]:
    """The values of a table's own fields."""
    if is_dataclass(table) and not isinstance(table, type):
        for f in fields(table):
            yield getattr(table, f.name)


def turner(sc: Scenario) -> Any:
    """The table that turns other parts' columns by position, or None where the scenario has none."""
    def answers(table: object) -> bool:
        return callable(getattr(table, "columns_turn", None))

    found = next((t for t in ask.tables(sc) if answers(t)), None)
    if found is None:
        found = next((v for t in ask.tables(sc) for v in _held(t) if answers(v)), None)
    return found
