"""How panes share the terminal: widths, heights and rows, in plain numbers (no Textual)."""

from __future__ import annotations

import bisect
from dataclasses import replace

from qkv_tui.display.view import PaneSpec


def pane_height(specs: list[PaneSpec]) -> int:
    """Lines the tallest pane needs: border, header and every row."""
    return max((int(s.values.shape[0]) + 3 for s in specs), default=0)


def natural_width(spec: PaneSpec, titled: bool = True, height: int | None = None) -> int:
    """Columns a pane needs: border, labels and cells, and room for its whole title if ``titled``.

    A pane cut to ``height`` lines scrolls, and its scrollbar takes a column.
    """
    scrollbar = 1 if height is not None and pane_height([spec]) > height else 0
    return max(spec.content_width + scrollbar, len(spec.title) + 4 if titled else 0) + 2


def fitted(specs: list[PaneSpec], total: int, height: int | None = None) -> list[PaneSpec]:
    """The panes, a transposed one (Kᵀ) without its row labels where only that makes every pane's cells fit.

    Kᵀ's rows are the dimensions, named in the same order across the top of Q beside it, so the
    column they take is the one a row of panes can best spare (RoPE's K'ᵀ at 80 columns: "0p0" … "3p1").
    """
    cells = sum(natural_width(s, titled=False, height=height) for s in specs)
    if cells <= total:
        return specs
    bare = [replace(s, row_labels=("",) * len(s.row_labels)) if s.transposed else s for s in specs]
    return bare if sum(natural_width(s, titled=False, height=height) for s in bare) <= total else specs


def share_width(specs: list[PaneSpec], total: int, height: int | None = None) -> list[int | str]:
    """Every pane its cells; spare columns complete the shortest-cut titles first.

    When even the cells do not fit, the panes that need less than an equal share get all
    they need (a 4-column Q beside a 16×16 scores matrix stays whole) and the big ones split
    what is left equally, scrolling inside.
    """
    cells = [natural_width(s, titled=False, height=height) for s in specs]
    spare = total - sum(cells)
    if spare < 0:
        widths: list[int | str] = ["1fr"] * len(cells)
        pending, room = set(range(len(cells))), total
        while pending:
            fair = room // len(pending)
            small = {i for i in pending if cells[i] <= fair}
            if not small:
                break
            for i in small:
                widths[i] = cells[i]
            room -= sum(cells[i] for i in small)
            pending -= small
        return widths
    widths = list(cells)
    wants = sorted((natural_width(s, height=height) - w, i) for i, (s, w) in enumerate(zip(specs, cells)))
    for want, i in wants:
        grant = min(want, spare)
        widths[i] = cells[i] + grant
        spare -= grant
    return widths


def pack_rows(specs: list[PaneSpec], width: int, per_row: int, titled: bool = True) -> list[list[PaneSpec]]:
    """Context panes packed into rows in order, at their width with (``titled``) or without their whole title.

    A pane wider than the screen is left out; one whose title alone is wider than the screen
    is packed at the width of its cells (its title is then shortened).
    """
    rows: list[list[PaneSpec]] = [[]]
    room = width
    for spec in specs:
        need = natural_width(spec, titled=titled)
        if need > width:
            need = natural_width(spec, titled=False)
            if need > width:
                continue
        if rows[-1] and (need > room or len(rows[-1]) == per_row):
            rows.append([])
            room = width
        rows[-1].append(spec)
        room -= need
    return [row for row in rows if row]


def overview_rows(specs: list[PaneSpec], width: int, per_row: int, max_rows: int, room: int,
                  min_height: int) -> list[list[PaneSpec]]:
    """The rows of context panes to show in ``room`` lines: whole titles where that shows every pane
    the tight packing would; else panes side by side with shortened titles (numbers beat titles).

    A row is shown when the lines left hold the whole row or at least ``min_height`` of it.
    """
    choices = []
    for titled in (True, False):
        shown, left = [], room
        for row in pack_rows(specs, width, per_row, titled)[:max_rows]:
            if left >= min(pane_height(row), min_height):
                shown.append(row)
                left -= min(left, pane_height(row))
        choices.append(shown)
    whole, tight = choices
    return whole if sum(map(len, whole)) >= sum(map(len, tight)) else tight


def visible_columns(offsets: tuple[int, ...], scroll_x: int, room: int) -> tuple[int, int]:
    """Columns [first, last) drawn in ``room`` cells after scrolling ``scroll_x``: whole columns only.

    ``offsets`` are where each column starts (one more for the end). A number cut in half
    would run into the row labels or read as another number ("-11" cut to "-1").
    """
    cols = len(offsets) - 1
    first = min(bisect.bisect_left(offsets, scroll_x), cols - 1)
    last = max(min(bisect.bisect_right(offsets, offsets[first] + room) - 1, cols), first)
    return first, last
