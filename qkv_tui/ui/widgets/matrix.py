"""MatrixView: one matrix pane on Textual's Line API.

Only the visible cells are formatted, so a step costs the same for a 3×3 and a
512×512 matrix. Column labels (top) and row labels (left) stay in place while
the cells scroll under them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip

from qkv_tui.core.fmt import fmt
from qkv_tui.display.layout import visible_columns
from qkv_tui.display.text import pictured, shorten, title_variants
from qkv_tui.display.view import PaneSpec, changed_rows
from qkv_tui.ui.widgets.looks import Styled
from qkv_tui.ui.widgets.scrolling import SyncedScrollView

NEG_INF = float("-inf")
HEAT_LEVELS = 64  # shades of the weights heatmap
RGB = tuple[int, int, int]
# the highlights' component classes (styled per theme in qkv.tcss), by the name the drawing code uses
LOOKS = ("label", "header", "current", "operand", "row-max", "masked", "changed")


@lru_cache(maxsize=4 * (HEAT_LEVELS + 1))
def _heat(level: int, low: RGB, high: RGB) -> Style:
    t = level / HEAT_LEVELS
    r, g, b = (round(lo + (hi - lo) * t) for lo, hi in zip(low, high))
    return Style(bgcolor=f"#{r:02x}{g:02x}{b:02x}")


def heat_style(weight: float, ends: tuple[RGB, RGB]) -> Style:
    """A background from the ``ends``' first colour (0) to their second (1); styles are shared, as a big
    pane draws thousands.

    Anything that is not a weight between 0 and 1 (NaN included: round(NaN) raises) gets the low end.
    """
    if not 0.0 <= weight <= 1.0:
        weight = 1.0 if weight > 1.0 else 0.0
    return _heat(round(weight * HEAT_LEVELS), *ends)


def _fit(text: str, width: int, right: bool = False) -> str:
    """A label cut or padded to ``width`` terminal cells (CJK and emoji take two); controls made visible."""
    text = pictured(text)
    fitted = set_cell_size(text, width)
    if right and cell_len(text) < width:
        fitted = " " * (width - cell_len(text)) + text
    return fitted


class MatrixView(SyncedScrollView, Styled, can_focus=False):
    """A scrolling grid of numbers with labels, progress and highlights.

    ``look("current")``, ``look("row-max")`` …: a highlight's style in the theme in force (qkv.tcss), its own
    rules only, to add to the pane's base style.
    """

    PREFIX = "matrix"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        *(f"matrix--{look}" for look in LOOKS), "matrix--heat-low", "matrix--heat-high",
    }
    SHARED_LOOKS = True  # a screen holds a dozen panes or more, all styled alike (looks.py)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.spec: PaneSpec | None = None
        self._placed: int | str | bool | None = False  # nothing placed yet (None means hidden)
        self._shown: tuple[object, ...] = ()
        self._base: Style | None = None  # rich_style walks every ancestor's CSS: keep it between frames
        self._titles: list[str] = [""]  # the spec's title, fullest first
        self._title_shown: tuple[str, str] | None = None

    def notify_style_update(self) -> None:
        self._base = None
        super().notify_style_update()

    @property
    def heat_ends(self) -> tuple[RGB, RGB]:
        """The weights' shades run between these two backgrounds (qkv.tcss)."""
        low, high = (self.look(f"heat-{end}").bgcolor for end in ("low", "high"))
        assert low is not None and high is not None, "qkv.tcss gives both ends a background"
        return low.get_truecolor(), high.get_truecolor()

    # --- geometry ---------------------------------------------------------------

    @property
    def label_width(self) -> int:
        return self.spec.label_width if self.spec else 0

    def place(self, width: int | str | None) -> None:
        """Take a width, or hide (None); styles change only when the width does, as each change costs a layout."""
        if width == self._placed:
            return
        self._placed = width
        if width is not None:
            self.styles.width = width
        self.display = width is not None

    def show(self, spec: PaneSpec) -> None:
        """Draw a new state of the pane and keep its current cell in view; unchanged rows are not redrawn."""
        state = (spec.key, spec.filled, spec.current, spec.rows, spec.cols, spec.cells, spec.decimals,
                 spec.title, spec.subtitle, spec.col_widths, spec.values.shape, spec.hide_current, id(spec.source),
                 spec.changed)
        if state == self._shown:
            return
        self._shown = state
        old, self.spec = self.spec, spec
        if old is None or (old.title, old.subtitle) != (spec.title, spec.subtitle):
            self._titles = title_variants(pictured(spec.title))
            self._fit_title()
        size = Size(spec.content_width, int(spec.values.shape[0]) + 1)
        resized = size != self.virtual_size
        if resized:
            self.set_virtual_size(size)
        rows = None if old is None or resized else changed_rows(old, spec)
        if rows is None:  # another matrix in this slot: borders, title, scrollbars and all
            self.refresh()
        elif len(rows) >= self.size.height:  # every visible row, but not the header or the scrollbars
            self._refresh_screen_lines(1, self.size.height - 1)
        else:
            top = int(self.scroll_y)
            for row in rows:
                if 0 <= row - top < self.size.height - 1:
                    self._refresh_screen_lines(row - top + 1, 1)  # line 0 is the pinned column header
        if spec.focus_point != (None, None) and (resized or self.max_scroll_x or self.max_scroll_y):
            self.call_after_refresh(self._follow_current)

    def _fit_title(self) -> None:
        """The fullest title that fits the border; the formula and shape go last (see title_variants)."""
        if self.spec is None:
            return
        # the width place() gave, before the layout pass makes it the real one
        width = self._placed if isinstance(self._placed, int) and not isinstance(self._placed, bool) else 0
        room = (width or self.outer_size.width) - 6  # "╭─ " and " ─╮"
        title = next((t for t in self._titles if cell_len(t) <= room), self._titles[-1])
        subtitle = shorten(pictured(self.spec.subtitle), max(room, 1))
        if (title, subtitle) != self._title_shown:
            self._title_shown = (title, subtitle)
            # Text, not str: a title is otherwise read as markup, and a head named "[x]" would break it;
            # setting a title redraws the whole pane, even when unchanged
            self.border_title = Text(title)
            self.border_subtitle = Text(subtitle)

    def on_resize(self) -> None:
        self._fit_title()
        # A pane given a new matrix after a jump (g, home, a stage key, tab) is laid out only after
        # show(): follow again once its real size is known, or the current cell may stay off screen.
        if self.spec is not None and self.spec.focus_point != (None, None):
            self._follow_current()

    def _refresh_screen_lines(self, y: int, count: int) -> None:
        """Redraw lines of the visible grid only (ScrollView's own helpers also repaint the scrollbars)."""
        self.refresh(Region(0, y, self.size.width, count))

    def _follow_current(self) -> None:
        """Keep the current cell, or else the cells being read, in view.

        Scrolls by pages, not lines, so that stepping on does not redraw the whole pane every time.
        """
        spec = self.spec
        if spec is None or not self.size.area:  # not laid out yet: on_resize follows once it is
            return
        row, col = spec.focus_point
        x, y = int(self.scroll_x), int(self.scroll_y)
        if row is not None:
            visible_rows = max(self.scrollable_content_region.height - 1, 1)
            if row < y:
                y = max(row - visible_rows * 3 // 4, 0)
            elif row >= y + visible_rows:
                y = row - visible_rows // 4
        if col is not None:
            room = max(self.scrollable_content_region.width - spec.label_width, 1)
            left, right = spec.offsets[col], spec.offsets[col + 1]
            if left < x:
                x = max(right - room * 3 // 4, 0)
            elif right > x + room:
                x = max(left - room // 4, right - room)
        if (x, y) != (int(self.scroll_x), int(self.scroll_y)):
            # force: the scrollbars of a pane that just took a bigger matrix are not updated yet,
            # and without it Textual refuses to scroll an axis that had no scrollbar
            self.scroll_to(x=x, y=y, animate=False, immediate=True, force=True)

    # --- drawing ----------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        width = self.scrollable_content_region.width  # a vertical scrollbar takes the last column: not a digit's
        spec = self.spec
        if spec is None:
            return Strip.blank(width, base)
        rows = int(spec.values.shape[0])
        label_w = spec.label_width
        cut = spec.lead_cut
        room = max(width - label_w, 0)
        first, last = visible_columns(spec.offsets, int(self.scroll_x), room + cut)
        if y == 0:
            label = Segment(" " * label_w, base)
            header = base + self.look("header")
            cells = [
                Segment(" " + _fit(spec.col_labels[c], spec.col_widths[c], right=True), header)
                for c in range(first, last)
            ]
        else:
            row = int(self.scroll_y) + y - 1
            if row >= rows:
                return Strip.blank(width, base)
            label = Segment(_fit(spec.row_labels[row], label_w), base + self.look("label"))
            cells = self._cells(spec, row, first, last, base)
        body = Strip(cells).crop(cut, room + cut)
        return Strip([label, *body]).crop_extend(0, width, base)

    def _cells(self, spec: PaneSpec, row: int, first: int, last: int, base: Style) -> list[Segment]:
        values = spec.values
        complete = spec.mark_row_max and spec.row_complete(row)
        largest = float(values[row].max()) if complete else None
        current = spec.current
        current_cols = () if current is None or current[0] != row else (current[1],)
        whole_row = row in spec.rows
        allow = spec.allow[row] if spec.allow is not None else None
        space = Segment(" ", base)
        masked, row_max, current_look = self.look("masked"), self.look("row-max"), self.look("current")
        changed, operand, ends = self.look("changed"), self.look("operand"), self.heat_ends
        out = []
        for col in range(first, last):
            style = base
            if not spec.is_filled(row, col):
                text = ""
            else:
                value = float(values[row, col])
                text = fmt(value, spec.integral, spec.decimals)
                if value == NEG_INF or (allow is not None and not allow[col]):
                    style = base + masked
                elif spec.heat:
                    style = base + heat_style(value, ends)
                elif value == largest:
                    style = base + row_max
            if current_cols and current_cols[0] in (None, col):
                style = base + current_look
                if spec.hide_current:
                    text = "?"
            elif spec.changed and (row, col) in spec.changed and text:
                style = base + changed
            elif whole_row or col in spec.cols or (row, col) in spec.cells:
                style = style + operand
            out.append(space)
            out.append(Segment(text.rjust(spec.col_widths[col]), style))
        return out
