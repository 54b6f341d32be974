"""How panes share the terminal: widths, heights and rows, in plain numbers (no Textual)."""

from __future__ import annotations

from .view import PaneSpec


def pane_height(specs: list[PaneSpec]) -> int:
    """Lines the tallest pane needs: border, header and every row."""
    return max((int(s.values.shape[0]) + 3 for s in specs), default=0)


def natural_width(spec: PaneSpec, titled: bool = True) -> int:
    """Columns a pane needs: border, labels and cells, and room for its whole title if ``titled``."""
    return max(spec.content_width, len(spec.title) + 4 if titled else 0) + 2


def share_width(specs: list[PaneSpec], total: int) -> list[int | str]:
    """Every pane its cells; spare columns complete the shortest-cut titles first; fr shares if even cells don't fit."""
    cells = [natural_width(s, titled=False) for s in specs]
    spare = total - sum(cells)
    if spare < 0:
        return [f"{w}fr" for w in cells]
    widths: list[int | str] = list(cells)
    wants = sorted((natural_width(s) - w, i) for i, (s, w) in enumerate(zip(specs, cells)))
    for want, i in wants:
        grant = min(want, spare)
        widths[i] = cells[i] + grant
        spare -= grant
    return widths


def pack_rows(specs: list[PaneSpec], width: int, per_row: int) -> list[list[PaneSpec]]:
    """Context panes packed into rows at their natural width, in order; a pane wider than the screen is left out."""
    rows: list[list[PaneSpec]] = [[]]
    room = width
    for spec in specs:
        need = natural_width(spec, titled=False)
        if need > width:
            continue
        if rows[-1] and (need > room or len(rows[-1]) == per_row):
            rows.append([])
            room = width
        rows[-1].append(spec)
        room -= need
    return [row for row in rows if row]
