"""[qk_norm]'s inputs as a learner edits them: its gains γ_q and γ_k, each one row.

They come with the layer's first inputs (after X, the context and the norm's gains), before the heads'; a gain the
file leaves at its default (all 1) is written whole when saved. core/cell_edit.py visits, changes and writes them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.qk_norm import QKNorm

KEYS = ("gamma_q", "gamma_k")  # in the order the arrow keys visit them
VECTORS = KEYS  # one row each: cell (0, i) is entry i
FIRST = True  # with the layer's first inputs, before the heads'
DEFAULTED = KEYS  # the file may leave them out (all 1): saving an edit writes the whole vector under its key


def editable(qk: QKNorm) -> dict[str, Matrix]:
    """The gains, as one row each."""
    return {key: getattr(qk, key)[None, :] for key in KEYS}


def with_entry(qk: QKNorm, target: str, row: int, col: int, value: float) -> QKNorm:
    """The table with one gain changed."""
    gains = np.array(getattr(qk, target), dtype=np.float64)
    gains[col] = value
    gains.setflags(write=False)
    changed: dict[str, Any] = {target: gains}
    return replace(qk, **changed)


def write_cell(table: Any, target: str, row: int, col: int, value: int | float) -> None:
    """Set one edited gain in the file's [qk_norm] table (tomlkit), where the file gives the vector."""
    table[target][col] = value
