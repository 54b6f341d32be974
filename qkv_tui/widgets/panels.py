"""The text panels around the matrices: the stage bar, the formula line and the explanation."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ..view import Explanation

STAGE_STYLE = {"current": "bold #000000 on #ffd75f", "done": "#5fd75f", "todo": "#8a8a8a"}


class StageBar(Static):
    """``I love AI · 1 Embed › 2 Project › [3 Score] › …`` with the current stage marked."""

    DEFAULT_CSS = """
    StageBar { height: 1; width: 1fr; background: $boost; }
    """

    def show(self, title: str, ex: Explanation) -> None:
        # narrow terminals drop the title, then the names of the stages not being computed
        width = self.app.size.width
        for with_title, full_names in ((True, True), (False, True), (False, False)):
            text = self._line(title if with_title else "", ex, full_names)
            if text.cell_len <= width:
                break
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass

    @staticmethod
    def _line(title: str, ex: Explanation, full_names: bool) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if title:
            text.append(f" {title} ", style="bold")
            text.append("  ")
        for i, (label, state) in enumerate(ex.stages):
            if i:
                text.append(" › ", style="#8a8a8a")
            if state == "current":
                text.append(f" {label} ", style=STAGE_STYLE[state])
            else:
                text.append(label if full_names else label.split()[0], style=STAGE_STYLE[state])
        return text


class FormulaLine(Static):
    """softmax(QKᵀ/√dₖ)V with the part being computed marked, and where we are."""

    DEFAULT_CSS = """
    FormulaLine { height: 1; width: 1fr; }
    """

    def show(self, ex: Explanation) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" ")
        for piece, active in ex.formula:
            text.append(piece, style="bold #000000 on #5fafff" if active else "#d0d0d0")
        text.append("   ")
        text.append(ex.stage_label, style="bold #ffd75f")
        text.append(" · ")
        text.append(ex.counter, style="bold")
        if ex.head_label:
            text.append(" · ")
            text.append(ex.head_label, style="bold #5fafff")
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass


class ExplainPanel(Static):
    """The current operation's arithmetic with its real numbers, and what the stage means."""

    DEFAULT_CSS = """
    ExplainPanel {
        height: 1fr;
        border-top: solid $panel-lighten-2;
        padding: 0 1;
    }
    """

    def lines_needed(self, width: int) -> int:
        """Screen lines this panel takes at a terminal width: its wrapped text and the top border."""
        return len(self._text.wrap(self.app.console, max(width - 2, 1))) + 1  # padding: one column each side

    _text = Text()

    def show(self, ex: Explanation, description: str = "") -> None:
        text = Text()
        text.append(ex.arithmetic, style="bold #ffd75f")
        for line in ex.details:
            text.append("\n")
            text.append(line, style="#d0d0d0")
        text.append("\n")
        text.append(ex.meaning, style="italic #8a8a8a")
        if description:
            text.append("\n")
            text.append(description, style="#87afd7")
        self._text = text
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass
