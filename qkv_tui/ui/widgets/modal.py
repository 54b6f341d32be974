"""A modal screen that closes once, and only itself, with a footer of its own keys.

The footer says what works on the modal (``esc close``, ``esc cancel``), where the trace's
footer beneath would claim ``q quit`` while q closes the modal or types into its box.

Textual's ``Screen.dismiss`` pops whatever screen is on top and resolves the result each time
it is called. Two keys typed quickly can both close a modal (enter, then escape before the
first has closed it; or enter, then ctrl+p, whose palette the late dismiss would pop instead):
the second call then resolves a result twice, which raises and ends the app.

Every modal is styled in qkv.tcss, with the rest of the app.
"""

from __future__ import annotations

from typing import TypeVar

from textual.await_complete import AwaitComplete
from textual.screen import ModalScreen

from qkv_tui.ui.widgets.panels import KeyFooter

ResultT = TypeVar("ResultT")


class Modal(ModalScreen[ResultT]):
    COMPACT_BELOW = 90  # columns under which the footer's keys sit closer, as the trace's do

    def on_mount(self) -> None:  # runs with a subclass's own on_mount: Textual calls each class's handler
        # styled in qkv.tcss: a modal's rules for its box (a ScrollableContainer, as a Footer is) must not reach it
        self.mount(KeyFooter(show_command_palette=False, compact=self.app.size.width < self.COMPACT_BELOW))

    def dismiss(self, result: ResultT | None = None) -> AwaitComplete:
        if not self.is_active:  # closed already, or another screen is on top: that one is not ours to close
            return AwaitComplete()  # awaiting nothing: done at once
        return super().dismiss(result)
