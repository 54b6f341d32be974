"""ScrollView with scrollbars that follow what is shown, after any sequence of resizes.

Textual (8.2) keeps two things of a scrollbar from an earlier frame: its visibility, when only
the content's size changes (a layout pass re-decides it only when the widget itself resizes),
and its thumb's position, when the view scrolls while that scrollbar is hidden (it is updated
only while shown). A resize storm shows both: a scrollbar with nothing to scroll, or a thumb
in the wrong place once the scrollbar comes back.
"""

from __future__ import annotations

from textual.geometry import Size
from textual.scroll_view import ScrollView


class SyncedScrollView(ScrollView):
    def set_virtual_size(self, size: Size) -> None:
        """Take a new content size and decide the scrollbars for it now."""
        self.virtual_size = size
        self._scroll_update(size)

    def watch_scroll_x(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_x(old_value, new_value)
        if self._horizontal_scrollbar is not None:  # hidden too: it may be shown again at this offset
            self._horizontal_scrollbar.position = new_value

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._vertical_scrollbar is not None:
            self._vertical_scrollbar.position = new_value
