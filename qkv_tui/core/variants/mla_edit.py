"""[mla]'s inputs as a learner edits them: the latent layer's own weights and its norms' gains.

Its heads hold no projections of their own (theirs are the latent's, multiplied through), so the heads' inputs are
neither listed nor addressed where the scenario has [mla], and an edit derives them again (heads_from). They come
with the layer's first inputs; a gain the file leaves at its default is written whole when saved. core/cell_edit.py
visits, changes and writes them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from qkv_tui.core.variants.mla import MLA_MATRICES, MLA_VECTORS, Mla
from qkv_tui.core.variants.mla import TABLE as TABLE  # re-exported: the editor reads the table through it
from qkv_tui.core.variants.mla import editable as editable  # the layer's inputs, as core/variants/mla.py gives them
from qkv_tui.core.variants.mla import with_entry as with_entry

KEYS = (*MLA_MATRICES, *MLA_VECTORS)  # in the order the arrow keys visit them
VECTORS = MLA_VECTORS  # one row each: cell (0, i) is entry i
FIRST = True  # with the layer's first inputs: the heads' come from these
DEFAULTED = MLA_VECTORS  # the file may leave the gains out: saving an edit writes the whole vector under its key

def heads_from(sc: Any) -> Any:
    """The scenario with its heads' multiplied-through W_Q, W_K and W_V from the latent's weights as they now are."""
    mla: Mla = TABLE.of(sc)  # type: ignore[assignment]
    derived = tuple(replace(h, W_Q=W_Q, W_K=W_K, W_V=W_V)
                    for h, (_, W_Q, W_K, W_V) in zip(sc.heads, mla.head_weights(), strict=True))
    return replace(sc, heads=derived)


def write_cell(table: Any, target: str, row: int, col: int, value: int | float) -> None:
    """Set one edited number in the file's [mla] table (tomlkit), where the file gives it."""
    if target in MLA_VECTORS:
        table[target][col] = value
    else:
        table[target][row][col] = value
