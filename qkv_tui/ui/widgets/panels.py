"""The text panels around the matrices: the stage bar, the formula line and the explanation."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from qkv_tui.screen.text import printable
from qkv_tui.screen.view import Explanation

STAGE_STYLE = {"current": "bold #000000 on #ffd75f", "done": "#5fd75f", "todo": "#8a8a8a"}
# the panels' text styles; ui/themes.py swaps both dicts for the light theme
TEXT = {
    "muted": "#8a8a8a", "formula": "#d0d0d0", "formula_active": "bold #000000 on #5fafff",
    "stage_label": "bold #ffd75f", "head_label": "bold #5fafff", "arithmetic": "bold #ffd75f",
    "detail": "#d0d0d0", "note": "#87d7af", "meaning": "italic #8a8a8a", "description": "#87afd7",
}


class StageBar(Static):
    """``I love AI · 1 Embed › 2 Project › [3 Score] › …`` with the current stage marked."""

    _shown: tuple[object, ...] = ()

    def show(self, title: str, ex: Explanation, width: int) -> None:
        # narrow terminals drop the title, then the names of the stages not being computed
        if (title, ex.stages, width) == self._shown:  # it changes only with the stage
            return
        self._shown = (title, ex.stages, width)
        for with_title, full_names in ((True, True), (False, True), (False, False)):
            text = self._line(title if with_title else "", ex, full_names)
            if text.cell_len <= width:
                break
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass

    @staticmethod
    def _line(title: str, ex: Explanation, full_names: bool) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if title:
            text.append(f" {printable(title)} ", style="bold")
            text.append("  ")
        for i, (label, state) in enumerate(ex.stages):
            if i:
                text.append(" › ", style=TEXT["muted"])
            if state == "current":
                text.append(f" {label} ", style=STAGE_STYLE[state])
            else:
                text.append(label if full_names else label.split()[0], style=STAGE_STYLE[state])
        return text


class FormulaLine(Static):
    """softmax(QKᵀ/√dₖ)V with the part being computed marked, and where we are."""

    def show(self, ex: Explanation, flags: str = "") -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" ")
        for piece, active in ex.formula:
            text.append(piece, style=TEXT["formula_active"] if active else TEXT["formula"])
        text.append("   ")
        text.append(ex.stage_label, style=TEXT["stage_label"])
        text.append(" · ")
        text.append(ex.counter, style="bold")
        if ex.head_label:
            text.append(" · ")
            text.append(printable(ex.head_label), style=TEXT["head_label"])
        if flags:
            text.append(f"   [{flags}]", style=TEXT["muted"])
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass


class ExplainPanel(Widget):
    """The current operation's arithmetic with its real numbers, and what the stage means.

    Drawn line by line from the wrapped text, and only the lines that differ from the last
    step are redrawn: most of the panel (the stage's meaning, the blank rest) stays put.
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._text = Text()
        self._strips: list[Strip] = []
        self._wrapped: tuple[int, list[Strip]] = (-1, [])  # (width, lines) of the current text

    def _wrap(self, width: int) -> list[Strip]:
        if self._wrapped[0] != width:
            console = self.app.console
            lines = console.render_lines(self._text, console.options.update_width(max(width, 1)), pad=False)
            self._wrapped = (width, [Strip(line) for line in lines])
        return self._wrapped[1]

    @property
    def plain(self) -> str:
        """The panel's text without styles."""
        return self._text.plain

    def lines_needed(self, width: int) -> int:
        """Screen lines this panel takes at a terminal width: its wrapped text and the top border."""
        return len(self._wrap(max(width - 2, 1))) + 1  # padding: one column each side

    def show(self, ex: Explanation, description: str = "", notes: tuple[str, ...] = ()) -> None:
        # every line is the scenario's words too (labels, names): no control character may break it
        text = Text()
        text.append(printable(ex.arithmetic), style=TEXT["arithmetic"])
        for line in ex.details:
            text.append("\n")
            text.append(printable(line), style=TEXT["detail"])
        for line in notes:
            text.append("\n")
            text.append(printable(line), style=TEXT["note"])
        text.append("\n")
        text.append(printable(ex.meaning), style=TEXT["meaning"])
        if description:
            text.append("\n")
            # a description's own line breaks are the author's layout: keep them, and only them
            text.append("\n".join(printable(line) for line in description.split("\n")), style=TEXT["description"])
        if text.plain == self._text.plain and text.spans == self._text.spans:
            return
        self._text = text
        self._wrapped = (-1, [])
        self._redraw_changed()

    def on_resize(self) -> None:
        self._redraw_changed()

    def _redraw_changed(self) -> None:
        width = self.size.width
        if not width:  # not laid out yet: render_line wraps at the real width
            self.refresh()
            return
        new = self._wrap(width)
        old, self._strips = self._strips, new
        for y in range(max(len(old), len(new))):
            if y >= len(old) or y >= len(new) or old[y] != new[y]:
                self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._wrapped[0] != width:  # laid out at a new width since the last step
            self._strips = self._wrap(width)
        strip = self._strips[y] if y < len(self._strips) else Strip.blank(width)
        return strip.apply_style(self.rich_style).crop_extend(0, width, self.rich_style)
