"""The heads view's maps (display/heads_grid.py lays them out): every head side by side, the picked one marked."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from qkv_tui.display.heads_grid import GLYPHS, MASKED, HeadsShown, Layout, glyph
from qkv_tui.ui.widgets.heatmap import LEVEL_STYLES

PICKED = "bold reverse"
STRONGEST = "bold yellow"
LEGEND = f"{GLYPHS[1:]} more weight · {MASKED} masked"


def render_grid(shown: HeadsShown, width: int, height: int) -> tuple[Text, Layout]:
    """The maps in ``width`` × ``height`` characters, and the layout that placed them."""
    grid = shown.grid
    layout = grid.layout(width, max(height - 1, 1), shown.picked)  # the last line: what is left out, the legend
    text = Text(no_wrap=True, overflow="crop")
    gap = " " * 2
    count = len(grid.maps)
    for map_row in layout.visible:
        heads = range(map_row * layout.per_row, min((map_row + 1) * layout.per_row, count))
        for h in heads:  # the titles
            name = grid.maps[h].name
            title = ("▶ " if h == shown.picked else "  ") + name
            marked = title.ljust(layout.map_width)[: layout.slot]  # the picked one's title marked over its map's width
            text.append(marked, style=PICKED if h == shown.picked else "bold")
            text.append(" " * (layout.slot - len(marked)))
            text.append(gap)
        text.append("\n")
        cells = {h: grid.cells(h, layout.rows, layout.cols) for h in heads}
        for r in range(layout.rows):
            for h in heads:
                if layout.label:
                    text.append(grid.labels[r][: layout.label - 1].ljust(layout.label), style="bold")
                row = cells[h].levels[r]
                top = cells[h].strongest[r]
                run, style = "", ""
                for c, level in enumerate(row):
                    s = STRONGEST if c == top else LEVEL_STYLES[level]
                    if s != style and run:
                        text.append(run, style=style)
                        run = ""
                    run, style = run + glyph(level, layout.cell), s
                text.append(run, style=style)
                text.append(" " * (layout.slot - layout.map_width) + gap)
            text.append("\n")
        for h in heads:  # what each map says
            line = grid.maps[h].reading(layout.slot).ljust(layout.slot)
            text.append(line, style="bold" if h == shown.picked else "dim")
            text.append(gap)
        text.append("\n\n")
    foot = f"{layout.note} · {LEGEND}" if layout.note else LEGEND
    text.append(foot, style="dim")
    return text, layout


class HeadsPanel(Static):
    """Every head's map, in the room the trace's panes leave (ui/app.py gives it its height)."""

    across = 1  # maps in a row as last drawn: ↑ ↓ move the pick by this many

    def show(self, shown: HeadsShown, width: int, height: int) -> None:
        text, layout = render_grid(shown, width, height)
        self.across = layout.per_row
        height = min(height, layout.lines + 1)  # the rest goes to the explanation
        if self.styles.height is None or self.styles.height.value != height:
            self.styles.height = height
        self.display = True
        self.update(text)

    def hide(self) -> None:
        if self.display:
            self.display = False
