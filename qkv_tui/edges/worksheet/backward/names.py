"""How the backward answer key names a cell: ``dV[love,1]``, and ``D[I]`` or ``dγ[0]`` where one of a table's axes
is a single cell labelled by the table's own name (D's column ``D``, a gain's row ``γ``), as the forward's
``ms[I]`` is named."""

from __future__ import annotations

from qkv_tui.teach.stages.printed import Table


def cell_name(table: Table, i: int, j: int, words: tuple[str, ...] | list[str]) -> str:
    """``table``'s cell (i, j); ``words`` are the scenario's token labels, which always stay (a one-token page)."""
    keep = [label for label, axis in ((table.rows[i], table.rows), (table.cols[j], table.cols))
            if len(axis) > 1 or label in words or label.isdigit()]
    return f"{table.name}[{','.join(keep)}]" if keep else table.name
