"""A head's soft-cap as a learner edits it: one number per head, where the head has one (core/cell_edit.py visits,
changes and writes it). [attention] gives every head one cap, so its heads change together; a [[heads]] table
has its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

NAME = "softcap"  # the cell's name in the prompt, and the head's key


def with_value(sc: Any, head: int, value: float, text: str) -> Any:
    """The scenario with the cap set to ``value``; a cap <= 0 is refused (ValueError), as the loader refuses it."""
    if value <= 0:
        raise ValueError(f"softcap = {text.strip()}: expected a number > 0 (the cap c in c·tanh(s/c))")
    together = sc.num_heads_split is not None
    heads = [replace(one, softcap=value) if together or h == head else one for h, one in enumerate(sc.heads)]
    return replace(sc, heads=tuple(heads))


def write_value(doc: Any, sc: Any, head: int, value: int | float) -> None:
    """Set the edited cap in the file (tomlkit): [attention]'s or the top level's for every head, else the head's
    own key, over any top-level cap."""
    if sc.num_heads_split is not None:
        if "softcap" in doc["attention"]:
            doc["attention"]["softcap"] = value
        else:
            doc["softcap"] = value
    else:
        doc["heads"][head]["softcap"] = value
