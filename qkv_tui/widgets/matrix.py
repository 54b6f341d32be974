"""MatrixView: one matrix pane on Textual's Line API.

Only the visible cells are formatted, so a step costs the same for a 3×3 and a
512×512 matrix. Column labels (top) and row labels (left) stay in place while
the cells scroll under them.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..fmt import fmt
from ..view import PaneSpec

LABEL = Style(color="#d7af5f", bold=True)
HEADER = Style(color="#8a8a8a", bold=True)
CURRENT = Style(color="#000000", bgcolor="#ffd75f", bold=True)
OPERAND = Style(bgcolor="#1f4e79", color="#ffffff")
ROW_MAX = Style(color="#5fd75f", bold=True)
MASKED = Style(color="#6c6c6c", dim=True)
HEAT_LOW = (32, 32, 40)
HEAT_HIGH = (20, 120, 70)


def heat_style(weight: float) -> Style:
    t = min(max(weight, 0.0), 1.0)
    r, g, b = (round(lo + (hi - lo) * t) for lo, hi in zip(HEAT_LOW, HEAT_HIGH))
    return Style(bgcolor=f"#{r:02x}{g:02x}{b:02x}")


class MatrixView(ScrollView, can_focus=False):
    """A scrolling grid of numbers with labels, progress and highlights."""

    DEFAULT_CSS = """
    MatrixView {
        border: round $panel-lighten-2;
        border-title-color: $text;
        border-subtitle-color: $text-muted;
        height: auto;
        max-height: 100%;
        scrollbar-size: 1 1;
        padding: 0;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.spec: PaneSpec | None = None

    # --- geometry ---------------------------------------------------------------

    @property
    def label_width(self) -> int:
        return max((len(label) for label in self.spec.row_labels), default=0) if self.spec else 0

    @property
    def column_width(self) -> int:
        return self.spec.cell_width + 1 if self.spec else 1

    def natural_size(self) -> Size:
        """Cells needed to show the whole matrix without scrolling."""
        if self.spec is None:
            return Size(0, 0)
        rows, cols = self.spec.values.shape
        return Size(self.label_width + cols * self.column_width + 1, rows + 1)

    def show(self, spec: PaneSpec) -> None:
        """Draw a new state of the pane and keep its current cell in view."""
        self.spec = spec
        self.border_title = spec.title
        self.border_subtitle = spec.subtitle
        size = self.natural_size()
        self.virtual_size = size
        self.refresh()
        self.call_after_refresh(self._follow_current)

    def _follow_current(self) -> None:
        spec = self.spec
        if spec is None or spec.current is None:
            return
        row, col = spec.current
        x, y = int(self.scroll_x), int(self.scroll_y)
        visible_rows = max(self.size.height - 1, 1)
        if row < y:
            y = row
        elif row >= y + visible_rows:
            y = row - visible_rows + 1
        if col is not None:
            cw = self.column_width
            visible_cols = max((self.size.width - self.label_width - 1) // cw, 1)
            first = x // cw
            if col < first:
                first = col
            elif col >= first + visible_cols:
                first = col - visible_cols + 1
            x = first * cw
        if (x, y) != (int(self.scroll_x), int(self.scroll_y)):
            self.scroll_to(x=x, y=y, animate=False, immediate=True)

    # --- drawing ----------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.size.width
        spec = self.spec
        if spec is None:
            return Strip.blank(width, base)
        rows, cols = spec.values.shape
        label_w = self.label_width
        cw = self.column_width
        first_col = int(self.scroll_x) // cw
        last_col = min(cols, first_col + max(width - label_w, 0) // cw + 1)
        segments: list[Segment]
        if y == 0:
            segments = [Segment(" " * label_w, base)]
            segments += [Segment(spec.col_labels[c][:cw - 1].rjust(cw), base + HEADER) for c in range(first_col, last_col)]
        else:
            row = int(self.scroll_y) + y - 1
            if row >= rows:
                return Strip.blank(width, base)
            segments = [Segment(spec.row_labels[row][:label_w].ljust(label_w), base + LABEL)]
            segments += self._cells(spec, row, first_col, last_col, base)
        return Strip(segments).crop_extend(0, width, base)

    def _cells(self, spec: PaneSpec, row: int, first: int, last: int, base: Style) -> list[Segment]:
        values = spec.values
        cw = self.column_width
        complete = spec.mark_row_max and spec.row_complete(row)
        row_max = float(values[row].max()) if complete else None
        out = []
        for col in range(first, last):
            style = base
            if not spec.is_filled(row, col):
                text = ""
            else:
                value = float(values[row, col])
                text = fmt(value, spec.integral, spec.decimals)
                if value == float("-inf") or (spec.allow is not None and not spec.allow[row, col]):
                    style = base + MASKED
                elif spec.heat:
                    style = base + heat_style(value)
                elif row_max is not None and value == row_max:
                    style = base + ROW_MAX
            current = spec.current
            if current is not None and current[0] == row and current[1] in (None, col):
                style = base + CURRENT
            elif row in spec.rows or col in spec.cols or (row, col) in spec.cells:
                style = style + OPERAND
            out.append(Segment(" ", base))
            out.append(Segment(text.rjust(cw - 1), style))
        return out

