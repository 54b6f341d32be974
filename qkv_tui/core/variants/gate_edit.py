"""A head's output gate weights as a learner edits them: W_G, d_model × d_v, where the heads have gates
(core/cell_edit.py visits and changes them as any head's matrix, and writes them here in the [attention] form)."""

from __future__ import annotations

from typing import Any

NAME = "W_G"  # the cell's name in the prompt, and the head's key


def write_wide(doc: Any, sc: Any, head: int, row: int, col: int, value: int | float) -> None:
    """Set one edited weight of [gate]'s wide W_G (tomlkit): every head's d_v columns side by side."""
    width = sc.heads[head].d_v
    doc["gate"]["W_G"][row][head * width + col] = value
