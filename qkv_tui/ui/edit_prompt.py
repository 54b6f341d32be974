"""The edit prompt (``e``): one input cell, its current value, and what was wrong with the last try.

It opens on the input cell the current operation reads (``X[love,0] = 0``); ↑/↓ move to the
previous / next input cell (X row by row, then each head's W_Q, W_K, W_V, then W_O, the scale
and the mask), or type a whole assignment (``W_K[1,2] = 3``, ``mask[I,love] = 0``, ``scale = 1``).
Enter applies; a value the scenario cannot take keeps the prompt open with a one-line reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Static

from qkv_tui.core.cell_edit import EditError, InputCell, input_cells, parse_address, value_of
from qkv_tui.core.scenario import Scenario
from qkv_tui.ui.widgets.modal import Modal

HINT = "enter applies · ↑/↓ another input · or type e.g. W_Q[1,2] = 0.5 · esc cancels"


def shown_value(sc: Scenario, cell: InputCell) -> str:
    """The value as the prompt offers it: exact (every digit), so enter alone changes nothing."""
    value = value_of(sc, cell)
    if cell.matrix == "mask":
        return "1" if value else "0"
    if value == round(value) and abs(value) < 1e15:
        return str(int(value))
    return np.format_float_positional(value, trim="-")  # the shortest text that reads back as the same float


class EditScreen(Modal[None]):
    """Ask for one input value; ``apply(cell, text)`` returns None when done, or why it cannot be."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "cancel"),
        Binding("up", "move(-1)", "previous input", show=False),
        Binding("down", "move(1)", "next input", show=False),
    ]

    def __init__(self, scenario: Scenario, cell: InputCell, apply: Callable[[InputCell, str], str | None]) -> None:
        super().__init__()
        self.scenario = scenario
        self.cells = input_cells(scenario)
        self.cell = cell
        self.apply = apply

    def compose(self) -> ComposeResult:
        with Vertical():
            with Horizontal(id="edit-row"):
                yield Static("", id="edit-label")
                field = Input(id="edit-input")
                field.cursor_blink = False  # steady: calmer, and snapshots stay stable
                yield field
            yield Static("", id="edit-error")
            yield Static(HINT, id="edit-hint")

    def on_mount(self) -> None:
        self.show_cell(self.cell)

    def show_cell(self, cell: InputCell) -> None:
        self.cell = cell
        self.query_one("#edit-label", Static).update(Text(f"{cell.label(self.scenario)} = ", style="bold"))
        field = self.query_one("#edit-input", Input)
        field.value = shown_value(self.scenario, cell)
        field.focus()
        field.select_all()  # typing replaces the shown value; → or home keeps it to amend

    def say(self, message: str) -> None:
        self.query_one("#edit-error", Static).update(Text(message))  # Text: what was typed is not markup

    def action_move(self, by: int) -> None:
        index = self.cells.index(self.cell) if self.cell in self.cells else 0
        self.show_cell(self.cells[(index + by) % len(self.cells)])
        self.say("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            cell, value = parse_address(self.scenario, event.value)
        except EditError as exc:
            self.say(str(exc))
            return
        problem = self.apply(cell or self.cell, value)
        if problem is not None:
            self.say(problem)
            return
        self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)



class DropEditsScreen(Modal[bool]):
    """Ask before unsaved edits are dropped (by a reload, or by opening another scenario): says which values
    would be lost; y goes ahead, escape (or n) keeps them."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "go ahead"),
        Binding("escape,n", "answer(False)", "keep the edits"),
    ]
    SHOWN = 4  # edits listed by name; the rest are counted
    GO = "y goes ahead"  # the hint's words for the keys that go ahead

    def __init__(self, question: str, lost: list[str], go: str | None = None) -> None:
        super().__init__()
        self.question = question
        self.lost = lost
        self.go = go or self.GO

    def compose(self) -> ComposeResult:
        count = len(self.lost)
        listed = ", ".join(self.lost[:self.SHOWN]) + (f" and {count - self.SHOWN} more" if count > self.SHOWN else "")
        with Vertical():
            yield Static(Text.assemble((self.question, "bold"),
                                       f" {count} unsaved edit{'s' if count != 1 else ''} would be lost: {listed}."),
                         id="drop-question")
            yield Static(f"{self.go} · esc keeps the edits (ctrl+s saves them, u undoes them one by one)",
                         id="drop-hint")

    def action_answer(self, go: bool) -> None:
        self.dismiss(go)


class ReloadScreen(DropEditsScreen):
    """The question before ``r`` drops unsaved edits; r again confirms, as y does."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("r", "answer(True)", "reload")]
    GO = "r or y reloads"
