"""A modal screen that closes once, and only itself.

Textual's ``Screen.dismiss`` pops whatever screen is on top and resolves the result each time
it is called. Two keys typed quickly can both close a modal (enter, then escape before the
first has closed it; or enter, then ctrl+p, whose palette the late dismiss would pop instead):
the second call then resolves a result twice, which raises and ends the app.
"""

from __future__ import annotations

from typing import TypeVar

from textual.await_complete import AwaitComplete
from textual.screen import ModalScreen

ResultT = TypeVar("ResultT")


class Modal(ModalScreen[ResultT]):
    def dismiss(self, result: ResultT | None = None) -> AwaitComplete:
        if not self.is_active:  # closed already, or another screen is on top: that one is not ours to close
            return AwaitComplete()  # awaiting nothing: done at once
        return super().dismiss(result)
