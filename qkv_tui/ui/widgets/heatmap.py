"""The attention map (key m): a head's weights as shaded cells over the whole sentence; tab walks the heads."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import ScrollableContainer
from textual.widgets import Static

from qkv_tui.display.heatmap import AttentionMap, attention_map
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.widgets.modal import Modal

LEVEL_STYLES = {-2: "", -1: "dim", 0: "", 1: "cyan", 2: "cyan", 3: "bright_cyan", 4: "bold bright_cyan"}


def render_map(amap: AttentionMap) -> Text:
    text = Text()
    text.append(amap.title + "\n", style="bold")
    text.append(amap.note + "\n\n", style="dim")
    pad = " " * (len(amap.row_labels[0]) + 1 if amap.row_labels else 0)
    for line in amap.header:
        text.append(pad)  # unstyled, apart from the labels: an SVG screenshot keeps the labels over their columns
        text.append(line + "\n", style="bold")
    for label, row in zip(amap.row_labels, amap.rows, strict=True):
        text.append(label + " ", style="bold")
        for cell in row:
            text.append(cell.text, style="bold yellow" if cell.strongest else LEVEL_STYLES[cell.level])
        text.append("\n")
    text.append("\n" + amap.legend + "\n", style="dim")
    text.append("yellow: each row's largest · tab: next head · escape: back", style="dim")
    return text


class HeatmapScreen(Modal[None]):
    """Every computed weight of one head, token labels on both axes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,m,q", "dismiss_screen", "close"),
        Binding("tab", "head(1)", "next head", priority=True),
        Binding("shift+tab", "head(-1)", "previous head", priority=True),
    ]

    def __init__(self, trace: Trace, head: int, index: int) -> None:
        super().__init__()
        self.trace, self.head, self.index = trace, head, index

    def compose(self) -> ComposeResult:
        with ScrollableContainer():
            yield Static(render_map(attention_map(self.trace, self.head, self.index)), id="heatmap")

    def action_head(self, step: int) -> None:
        self.head = (self.head + step) % len(self.trace.comp.heads)
        self.query_one("#heatmap", Static).update(render_map(attention_map(self.trace, self.head, self.index)))

    def action_dismiss_screen(self) -> None:
        self.dismiss()
