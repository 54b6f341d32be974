"""A head's sink as a learner edits it: one number per head, where the head has one (core/cell_edit.py visits,
changes and writes it; ``sink`` in a [[heads]] table, item h of [attention]'s ``sinks``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

NAME = "sink"  # the cell's name in the prompt, and the head's key


def with_value(sc: Any, head: int, value: float, text: str) -> Any:
    """The scenario with head ``head``'s sink set to ``value`` (any finite logit)."""
    heads = list(sc.heads)
    heads[head] = replace(heads[head], sink=value)
    return replace(sc, heads=tuple(heads))


def write_value(doc: Any, sc: Any, head: int, value: int | float) -> None:
    """Set the edited sink in the file (tomlkit): the head's own key, or its item of [attention]'s list."""
    if sc.num_heads_split is not None:
        doc["attention"]["sinks"][head] = value
    else:
        doc["heads"][head]["sink"] = value
