"""How panes share the terminal: widths, heights and rows, in plain numbers (no Textual)."""

from __future__ import annotations

import bisect
from dataclasses import replace

from qkv_tui.core.fmt import cell_len
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
    """The panes, with fewer row labels where only that makes every pane's cells fit in ``total`` columns.

    Each step is taken only where the ones before it do not fit, and none where even the last does
    not (the panes then scroll, and every label says which row is which):

    1. a transposed pane (Kᵀ) drops its row labels: its rows are the dimensions, named in the same
       order across the top of Q beside it (RoPE's K'ᵀ at 80 columns: "0p0" … "3p1");
    2. a pane whose row labels repeat those of the labelled pane to its left drops them: the panes
       stand side by side, so its rows read across from that pane's labels (Loss's concat, target
       and dO at 80 columns). Only where no pane is cut in height, as each scrolls its own rows;
    3. the labels left are cut to the fewest characters that still fit, as long as they stay
       distinct within their pane ("love" → "l").

    No cell is ever left out: the arithmetic line's operands stay on screen, as it prints them.
    """
    def fits(panes: list[PaneSpec]) -> bool:
        return sum(natural_width(s, titled=False, height=height) for s in panes) <= total

    if fits(specs):
        return specs
    bare = [_unlabelled(s) if s.transposed else s for s in specs]
    if fits(bare):
        return bare
    if height is None or all(pane_height([s]) <= height for s in specs):
        bare = _unrepeated(bare)
        if fits(bare):
            return bare
    for width in range(max(s.label_width for s in bare) - 1, 0, -1):
        cut = [_cut_labels(s, width) for s in bare]
        if all(len(set(s.row_labels)) == len(set(b.row_labels)) for s, b in zip(cut, bare)) and fits(cut):
            return cut
    return specs


def _unlabelled(spec: PaneSpec) -> PaneSpec:
    return replace(spec, row_labels=("",) * len(spec.row_labels))


def _unrepeated(specs: list[PaneSpec]) -> list[PaneSpec]:
    """Each pane without the row labels the labelled pane to its left already shows on the same lines."""
    out, shown = [], None
    for spec in specs:
        if not spec.label_width:
            out.append(spec)
        elif spec.row_labels == shown:
            out.append(_unlabelled(spec))
        else:
            out.append(spec)
            shown = spec.row_labels
    return out


def _cut_labels(spec: PaneSpec, width: int) -> PaneSpec:
    """The pane with every row label cut to its first ``width`` columns (a CJK character takes two)."""
    if spec.label_width <= width:
        return spec
    return replace(spec, row_labels=tuple(_prefix(label, width) for label in spec.row_labels))


def _prefix(label: str, width: int) -> str:
    cut = ""
    for ch in label:
        if cell_len(cut + ch) > width:
            break
        cut += ch
    return cut


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
