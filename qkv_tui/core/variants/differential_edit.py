"""[differential]'s inputs as a learner edits them: the four λ vectors (one row per head) and the sub-norm's gains.

The gains' edit target is ``gamma_sub`` (``gamma`` is [norm]'s), as the [backward] train list names it; in the
file it is [differential]'s own ``gamma`` key. core/cell_edit.py visits, changes and writes these cells.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from qkv_tui.core.arrays import Matrix
from qkv_tui.core.variants.differential import GAMMA_NAME, LAMBDA_KEYS, MAX_EXPONENT, Differential
from qkv_tui.core.variants.differential import TABLE as TABLE  # re-exported: the editor reads the table through it

KEYS = (*LAMBDA_KEYS, GAMMA_NAME)  # in the order the arrow keys visit them
VECTORS = (GAMMA_NAME,)  # one row: cell (0, i) is entry i


def editable(df: Differential) -> dict[str, Matrix]:
    """The inputs the table gives, as 2-D arrays (the gains as one row)."""
    out: dict[str, Matrix] = {key: getattr(df, key) for key in LAMBDA_KEYS}
    if df.gamma is not None:
        out[GAMMA_NAME] = df.gamma[None, :]
    return out


def with_entry(df: Differential, target: str, row: int, col: int, value: float) -> Differential:
    """The table with one number changed (shapes stay); a λ whose e^ would pass float64 is refused, as the loader
    refuses it."""
    if target == GAMMA_NAME:
        assert df.gamma is not None
        gains = np.array(df.gamma, dtype=np.float64)
        gains[col] = value
        gains.setflags(write=False)
        return replace(df, gamma=gains)
    array = np.array(getattr(df, target), dtype=np.float64)
    array[row, col] = value
    array.setflags(write=False)
    changed: dict[str, Any] = {target: array}
    new = replace(df, **changed)
    for q, k in ((0, 1), (2, 3)):
        with np.errstate(over="ignore", invalid="ignore"):
            dot = float(getattr(new, LAMBDA_KEYS[q])[row] @ getattr(new, LAMBDA_KEYS[k])[row])
        if not dot <= MAX_EXPONENT:
            raise ValueError(f"{LAMBDA_KEYS[q]}·{LAMBDA_KEYS[k]} of head {row + 1} would be {dot:g}, and e^ of it"
                             f" overflows float64; expected a dot product of at most {MAX_EXPONENT:g}")
    return new


def write_cell(table: Any, target: str, row: int, col: int, value: int | float) -> None:
    """Set one edited number in the file's [differential] table (tomlkit)."""
    if target == GAMMA_NAME:
        table["gamma"][col] = value
    else:
        table[target][row][col] = value
