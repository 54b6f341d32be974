"""The heads view's maps (display/heads_grid.py lays them out): every head side by side, the picked one marked.

Drawn with Textual's Line API, a strip of segments a line, with the styles parsed once: a Rich Text of a
few thousand spans costs a frame tens of milliseconds to convert, and an arrow key redraws every map.
"""

from __future__ import annotations

from functools import cache, lru_cache

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget

from qkv_tui.display.heads_grid import (
    GLYPHS,
    MASKED,
    MINUS,
    NEGATIVE,
    HeadsGrid,
    HeadsShown,
    Layout,
    glyph,
    key_labels,
)

PICKED = "bold reverse"
STRONGEST = "bold yellow"
LEVEL_STYLES = {-1: "dim", 0: "", 1: "cyan", 2: "cyan", 3: "bright_cyan", 4: "bold bright_cyan",  # the map's (m)
                NEGATIVE: "bold red"}  # a weight below 0 (display/heads_grid.py)
LEGEND = f"{GLYPHS[1:]} more weight · {MASKED} masked"


def legend(grid: HeadsGrid) -> str:
    """The legend's line: what the masked mark stands for, as the grid says (a key the indexer left out, too), and
    the minus of a weight below 0 where a map has one (a differential head's)."""
    said = LEGEND if grid.masked == "masked" else f"{GLYPHS[1:]} more weight · {MASKED} {grid.masked}"
    below = any(bool((m.weights < 0).any()) for m in grid.maps)
    return said + (f" · {MINUS * 2} below 0" if below else "")
GAP = "  "

Line = list[tuple[str, str]]  # (text, style) pieces
Cells = tuple[tuple[str, str], ...]  # a line of a map's cells, the same tuple from press to press


@cache
def _style(name: str) -> Style:
    return Style.parse(name) if name else Style.null()


def grid_lines(shown: HeadsShown, width: int, height: int) -> tuple[list[Line | Cells], Layout]:
    """The maps in ``width`` × ``height`` characters, line by line, and the layout that placed them."""
    grid = shown.grid
    layout = grid.layout(width, max(height - 1, 1), shown.picked)  # the last line: what is left out, the legend
    lines: list[Line | Cells] = []
    count = len(grid.maps)
    for map_row in layout.visible:
        heads = range(map_row * layout.per_row, min((map_row + 1) * layout.per_row, count))
        line: Line = []
        for h in heads:  # the titles
            title = ("▶ " if h == shown.picked else "  ") + grid.maps[h].name
            if len(title) > layout.slot:  # a narrow map: its number, 1-based as the status line's (2/16)
                title = ("▶" if h == shown.picked else " ") + str(h + 1)
            marked = title.ljust(layout.map_width)[: layout.slot]  # the picked one's title marked over its map
            line += [(marked, PICKED if h == shown.picked else "bold"), (" " * (layout.slot - len(marked)) + GAP, "")]
        lines.append(line)
        if layout.keys:  # the keys along the top, over their columns
            line = []
            for _ in heads:
                line += [(" " * layout.label + key_labels(grid.keys, layout.cell).ljust(layout.slot - layout.label), "dim"),
                         (GAP, "")]
            lines.append(line)
        lines += _cell_lines(grid, layout, heads)
        line = []
        for h in heads:  # what each map says
            line += [(grid.reading(h, layout.slot).ljust(layout.slot), "bold" if h == shown.picked else "dim"), (GAP, "")]
        lines += [line, [(" ", "")]]
    said = legend(grid)
    lines.append([(f"{layout.note} · {said}" if layout.note else said, "dim")])
    return lines, layout


@lru_cache(maxsize=256)
def _cell_lines(grid: HeadsGrid, layout: Layout, heads: range) -> tuple[Cells, ...]:
    """The cells of a row of maps: the same whichever head is picked, so made once per grid and layout."""
    cells = {h: grid.cells(h, layout.rows, layout.cols) for h in heads}
    lines = []
    for r in range(layout.rows):
        line: Line = []
        for h in heads:
            if layout.label:
                line.append((grid.labels[r][: layout.label - 1].ljust(layout.label), "bold"))
            top = cells[h].strongest[r]
            run, style = "", ""
            for c, level in enumerate(cells[h].levels[r]):
                s = STRONGEST if c == top else LEVEL_STYLES[level]
                if s != style and run:
                    line.append((run, style))
                    run = ""
                run, style = run + glyph(level, layout.cell), s
            line += [(run, style), (" " * (layout.slot - layout.map_width) + GAP, "")]
        lines.append(tuple(line))
    return tuple(lines)


@lru_cache(maxsize=4096)
def _strip(line: tuple[tuple[str, str], ...], width: int) -> Strip:
    return _fitted(Strip([Segment(text, _style(style)) for text, style in line]), width)


def _fitted(strip: Strip, width: int) -> Strip:
    """Cut or padded to the panel's width: a short line would leave the screen's colour behind it."""
    return strip.crop(0, width).extend_cell_length(width)


def plain(lines: list[Line | Cells]) -> str:
    """The maps as text, one line each (for tests and the benchmark's check)."""
    return "\n".join("".join(text for text, _ in line).rstrip() for line in lines)


class HeadsPanel(Widget):
    """Every head's map, in the room the trace's panes leave (ui/app.py gives it its height)."""

    across = 1  # maps in a row as last drawn: ↑ ↓ move the pick by this many
    text = ""  # the maps as last drawn, plain

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._strips: list[Strip] = []
        self._height = -1

    def show(self, shown: HeadsShown, width: int, height: int) -> None:
        lines, layout = grid_lines(shown, width, height)
        self.across = layout.per_row
        self.text = plain(lines)
        # a map's cells are the same tuples from one press to the next (_cell_lines): their strips are kept
        self._strips = [_strip(line, width) if isinstance(line, tuple) else
                        _fitted(Strip([Segment(text, _style(style)) for text, style in line]), width) for line in lines]
        height = min(height, len(lines))  # the rest goes to the explanation
        if height != self._height:  # a style change costs a layout pass: only when the size moves
            self._height = height
            self.styles.height = height
        if not self.display:
            self.display = True
        self.refresh()  # the same size: a repaint, no layout

    def render_line(self, y: int) -> Strip:
        return self._strips[y] if y < len(self._strips) else Strip.blank(self.size.width)

    def hide(self) -> None:
        if self.display:
            self.display = False
