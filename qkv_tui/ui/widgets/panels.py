"""The text panels around the matrices: the stage bar, the formula line and the explanation."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widgets import Static

from qkv_tui.core.fmt import cell_len
from qkv_tui.screen.text import printable, shorten, wrap
from qkv_tui.screen.view import Explanation
from qkv_tui.ui.widgets.scrolling import SyncedScrollView

TITLE_MIN = 12  # a title cut shorter than this says little: name only the current stage first
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
        # a narrow terminal shortens the title, then names only the stage being computed, then shortens
        # the title further; the title goes only when not even a few letters of it fit
        if (title, ex.stages, width) == self._shown:  # it changes only with the stage
            return
        self._shown = (title, ex.stages, width)
        title = printable(title)
        text = self._line("", ex, full_names=False)
        for full_names, least in ((True, len(title)), (True, TITLE_MIN), (False, len(title)), (False, 4)):
            stages = self._line("", ex, full_names)
            room = width - stages.cell_len - 4  # the title's padding and the gap after it
            if room >= min(least, cell_len(title)):
                text = self._line(shorten(title, room), ex, full_names)
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
                text.append(" › ", style=TEXT["muted"])
            if state == "current":
                text.append(f" {label} ", style=STAGE_STYLE[state])
            else:
                text.append(label if full_names else label.split()[0], style=STAGE_STYLE[state])
        return text


class FormulaLine(Static):
    """softmax(QKᵀ/√dₖ)V with the part being computed marked, and where we are.

    A narrow terminal gets the same facts in fewer cells: tighter gaps, the formula without
    the parts not being computed after V, shorter flags and head name, and at last no formula.
    Where we are (stage, operation, head) is never cut.
    """

    def show(self, ex: Explanation, flags: str = "", width: int = 1_000) -> None:
        name, _, count = ex.head_label.rpartition(" (")
        head = (printable(name), f"({count}") if ex.head_label else None
        for fit in FITS:
            text = self._line(ex, flags, head, fit)
            if text.cell_len <= width:
                break
        self.update(text, layout=False)  # its size is fixed by CSS: no layout pass

    @staticmethod
    def _line(ex: Explanation, flags: str, head: tuple[str, str] | None, fit: Fit) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" ")
        if fit.formula:
            after_v = False
            for piece, active in ex.formula:
                if after_v and not fit.tail and not active:
                    continue
                text.append(piece, style=TEXT["formula_active"] if active else TEXT["formula"])
                after_v = after_v or piece == "V"
            text.append(fit.gap)
        text.append(ex.stage_label, style=TEXT["stage_label"])
        text.append(" · ")
        text.append(ex.counter, style="bold")
        if head is not None:
            text.append(" · ")
            text.append(f"{shorten(head[0], fit.name) if fit.name else head[0]} {head[1]}", style=TEXT["head_label"])
        if flags:
            if fit.compact_flags:
                flags = flags.replace(" dp", "dp").replace(" · ", "·")
            text.append(f"{fit.gap}[{flags}]", style=TEXT["muted"])
        return text


@dataclass(frozen=True)
class Fit:
    """One way of writing the formula line, from roomiest to tightest."""

    gap: str = "   "  # between the formula, where we are, and the flags
    tail: bool = True  # the formula's parts after V (→ concat·W_O) even when not being computed
    compact_flags: bool = False  # [3dp·by hand] rather than [3 dp · by hand]
    name: int = 0  # cells the head's name is cut to; 0 = whole
    formula: bool = True


FITS = (Fit(), Fit(gap="  "), Fit(gap="  ", tail=False), Fit(gap="  ", tail=False, compact_flags=True),
        Fit(gap="  ", tail=False, compact_flags=True, name=8),
        Fit(gap=" ", tail=False, compact_flags=True, name=4, formula=False))


class ExplainPanel(SyncedScrollView, can_focus=False):
    """The current operation's arithmetic with its real numbers, and what the stage means.

    Each line is wrapped at term boundaries (never inside an expression) with a hanging
    indent, and only the screen lines that differ from the last step are redrawn: most of
    the panel (the stage's meaning, the blank rest) stays put. When the terminal is too
    short for all of it, the panel scrolls (mouse wheel, or page up / page down).
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: tuple[tuple[str, str], ...] = ()  # (text, style key in TEXT) of each logical line
        self._strips: list[Strip] = []
        self._wrapped: tuple[int, list[Strip]] = (-1, [])  # (width, lines) of the current text

    def _wrap(self, width: int) -> list[Strip]:
        if self._wrapped[0] != width:
            strips = []
            for text, kind in self._lines:
                rich = _style(TEXT[kind])
                prose = kind in ("meaning", "description")  # sentences, not arithmetic
                strips += [Strip([Segment(line, rich)]) for line in wrap(text, width, prose=prose)]
            self._wrapped = (width, strips)
        return self._wrapped[1]

    @property
    def plain(self) -> str:
        """The panel's text without styles, one logical line per line (not wrapped)."""
        return "\n".join(text for text, _ in self._lines)

    def lines_needed(self, width: int) -> int:
        """Screen lines this panel takes at a terminal width: its wrapped text and the top border."""
        return len(self._wrap(max(width - 2, 1))) + 1  # padding on the left, the scrollbar's gutter on the right

    def show(self, ex: Explanation, description: str = "", notes: tuple[str, ...] = ()) -> None:
        # every line is the scenario's words too (labels, names): no control character may break it
        lines = [(printable(ex.arithmetic), "arithmetic")]
        lines += [(printable(line), "detail") for line in ex.details]
        lines += [(printable(line), "note") for line in notes]
        lines.append((printable(ex.meaning), "meaning"))
        # a description's own line breaks are the author's layout: keep them, and only them
        lines += [(printable(line), "description") for line in description.split("\n") if description]
        if tuple(lines) == self._lines:
            return
        self._lines = tuple(lines)
        self._wrapped = (-1, [])
        if self.scroll_y:
            self.scroll_to(y=0, animate=False, immediate=True)  # a new operation reads from its first line
        self._redraw_changed()

    def restyle(self) -> None:
        """Draw the same lines in the colours of a new theme."""
        self._wrapped = (-1, [])
        self._redraw_changed()

    def on_resize(self) -> None:
        self._redraw_changed()

    def _redraw_changed(self) -> None:
        width = self.scrollable_content_region.width
        if not width:  # not laid out yet: render_line wraps at the real width
            self.refresh()
            return
        new = self._wrap(width)
        old, self._strips = self._strips, new
        size = Size(width, len(new))
        if size != self.virtual_size:
            self.set_virtual_size(size)
            self.refresh()
            return
        top = int(self.scroll_y)
        for y in range(max(len(old), len(new))):
            if (y >= len(old) or y >= len(new) or old[y] != new[y]) and 0 <= y - top < self.size.height:
                self.refresh(Region(0, y - top, width, 1))

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if self._wrapped[0] != width:  # laid out at a new width since the last step
            self._strips = self._wrap(width)
        row = y + int(self.scroll_y)
        strip = self._strips[row] if row < len(self._strips) else Strip.blank(width)
        return strip.apply_style(self.rich_style).crop_extend(0, width, self.rich_style)


@lru_cache(maxsize=32)
def _style(text: str) -> Style:
    return Style.parse(text)
