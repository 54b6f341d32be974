"""The command palette, with page up and page down that cannot crash it.

Textual 8.2.8's OptionList moves a page by looking up the line of the highlighted option; pressed
before the palette has laid its list out (a key storm right after ctrl+p, or a slow machine), that
table is still empty and the lookup raises KeyError, which ends the app. Here the page keys wait for
the layout instead: a press that comes too early does nothing, as a press on an empty list does.
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.command import CommandList, CommandPalette
from textual.widgets import OptionList


def page(options: OptionList, direction: int) -> bool:
    """Move the highlight a page up (-1) or down (1); False when the list is not laid out yet."""
    try:
        # Textual leaves these two actions unannotated
        options.action_page_down() if direction > 0 else options.action_page_up()  # type: ignore[no-untyped-call]
    except KeyError:  # no lines yet for the highlighted option: nothing is on screen to page through
        return False
    return True


class Palette(CommandPalette):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("pagedown", "page(1)", "Next page", show=False),
        Binding("pageup", "page(-1)", "Previous page", show=False),
    ]

    def action_page(self, direction: int) -> None:
        page(self.query_one(CommandList), direction)
