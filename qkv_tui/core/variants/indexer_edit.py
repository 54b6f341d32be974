"""[indexer]'s inputs as a learner edits them: ``top_k`` (one whole number, typed ``top_k = 4``) and the index
weights W_q, W_k and W_w (``W_w[1,0] = 2``). core/cell_edit.py visits, changes and writes these cells; top_k is
one of the table's SCALARS, a cell without row or column."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.common import MAX_SIZE
from qkv_tui.core.variants.indexer import TABLE as TABLE  # re-exported: the editor reads the table through it
from qkv_tui.core.variants.indexer import Indexer

TOP_K = "top_k"
WEIGHTS = ("W_q", "W_k", "W_w")
KEYS = (TOP_K, *WEIGHTS)  # in the order the arrow keys visit them
VECTORS: tuple[str, ...] = ()
SCALARS = (TOP_K,)  # one number, no row or column: ``top_k = 4``


def editable(ix: Indexer) -> dict[str, Matrix]:
    """The inputs the table gives, as 2-D arrays (top_k as a 1×1)."""
    top_k: Matrix = np.array([[float(ix.top_k)]])
    return {TOP_K: top_k, **{key: getattr(ix, key) for key in WEIGHTS}}


def with_entry(ix: Indexer, target: str, row: int, col: int, value: float) -> Indexer:
    """The table with one number changed (shapes stay); a top_k that is not a whole number from 1 is refused, as
    the loader refuses it."""
    if target == TOP_K:
        if value != int(value) or not 1 <= value <= MAX_SIZE:
            raise ValueError(f"top_k = {value:g}: expected a whole number from 1 to {MAX_SIZE:,} (how many keys each"
                             " query keeps)")
        return replace(ix, top_k=int(value))
    array = np.array(getattr(ix, target), dtype=np.float64)
    array[row, col] = value
    array.setflags(write=False)
    changed: dict[str, Any] = {target: array}
    return replace(ix, **changed)


def write_cell(table: Any, target: str, row: int, col: int, value: int | float) -> None:
    """Set one edited number in the file's [indexer] table (tomlkit)."""
    if target == TOP_K:
        table[TOP_K] = int(value)
    else:
        table[target][row][col] = value
