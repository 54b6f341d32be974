"""ScrollView with scrollbars that follow what is shown, after any sequence of resizes.

Textual (8.2) keeps two things of a scrollbar from an earlier frame: its visibility, when only
the content's size changes (a layout pass re-decides it only when the widget itself resizes),
and its thumb's position, when the view scrolls while that scrollbar is hidden (it is updated
only while shown). A resize storm shows both: a scrollbar with nothing to scroll, or a thumb
in the wrong place once the scrollbar comes back. Both are mended here with public means: the
scrollbars' reactives (show_*_scrollbar) and the scrollbars themselves.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView


class SyncedScrollView(ScrollView):
    def set_virtual_size(self, size: Size) -> None:
        """Take a new content size and decide the scrollbars for it now."""
        self.virtual_size = size
        if self.container_size:  # laid out: otherwise the first layout pass decides
            self._show_scrollbars(size)
        width, height = self.container_size
        if self.show_vertical_scrollbar and self.styles.scrollbar_size_vertical:
            bar = self.vertical_scrollbar
            bar.window_virtual_size = size.height
            bar.window_size = height - self.scrollbar_size_horizontal
            bar.refresh()
        if self.show_horizontal_scrollbar and self.styles.scrollbar_size_horizontal:
            bar = self.horizontal_scrollbar
            bar.window_virtual_size = size.width
            bar.window_size = width - self.scrollbar_size_vertical
            bar.refresh()
        self.scroll_x = self.validate_scroll_x(self.scroll_x)  # a smaller content scrolls back into range
        self.scroll_y = self.validate_scroll_y(self.scroll_y)

    def _show_scrollbars(self, size: Size) -> None:
        """Each scrollbar shown when its overflow asks for it, as Textual decides in a layout pass."""
        width, height = self.container_size
        styles = self.styles

        def needed(overflow: str, over: bool) -> bool:
            return overflow == "scroll" or (overflow == "auto" and over)

        horizontal = needed(styles.overflow_x, size.width > width)
        vertical = needed(styles.overflow_y, size.height > height)
        # one scrollbar takes room from the other axis, which may then need one too
        if styles.overflow_x == "auto" and vertical and not horizontal:
            horizontal = size.width > width - styles.scrollbar_size_vertical
        if styles.overflow_y == "auto" and horizontal and not vertical:
            vertical = size.height > height - styles.scrollbar_size_horizontal
        was = (self.show_horizontal_scrollbar, self.show_vertical_scrollbar)
        self.show_horizontal_scrollbar, self.show_vertical_scrollbar = horizontal, vertical
        if horizontal or was[0]:  # a scrollbar never shown is never made
            self.horizontal_scrollbar.display = horizontal
        if vertical or was[1]:
            self.vertical_scrollbar.display = vertical

    def watch_show_horizontal_scrollbar(self, shown: bool) -> None:
        if shown:  # the view may have scrolled while it was hidden
            self.horizontal_scrollbar.position = self.scroll_x

    def watch_show_vertical_scrollbar(self, shown: bool) -> None:
        if shown:
            self.vertical_scrollbar.position = self.scroll_y
