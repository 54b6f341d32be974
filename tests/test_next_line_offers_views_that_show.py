"""The last operation's "Next:" line offers a side view only where it shows something (display/side_view.py
empty): on [ssd], [differential], [shared_kv] and a sparse selection a part refuses the cache and the tiles, and
heads that keep a state ([kda], [linear]) have no tiles, so ``k the KV cache · t FlashAttention's tiles`` offered
keys that answered with one line saying why not. Each key offered is checked by opening its view: its first
screen is not that line."""

from __future__ import annotations

import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.side_views import SIDE_VIEWS
from qkv_tui.teach.stepper import Position

WHY_NOT = ("not shown", "no tiles")  # what the one-line screens call themselves (refused_view, state_view)


def next_line(presenter: Presenter) -> str:
    last = Position(len(presenter.exact) - 1, 0)
    lines = [note for note in presenter.frame(last, Modes()).notes if note.startswith("Next: ")]
    assert len(lines) == 1
    return lines[0]


def offered(line: str) -> set[str]:
    """The side views' keys the line names ("k the KV cache")."""
    named = {view.key for view in SIDE_VIEWS if view.closing}
    return {piece.split(" ", 1)[0] for piece in line.removeprefix("Next: ").split(" · ")} & named


def first_screen(presenter: Presenter, key: str) -> str:
    view = next(view for view in SIDE_VIEWS if view.key == key)
    return presenter.frame(Position(0, 0), Modes(view=view.name)).explanation.stage_label


@pytest.mark.parametrize(("name", "keys"), [
    ("i_love_ai", {"k", "t"}),
    ("kda", {"k"}),  # a state: k steps through it, and there are no tiles
    ("linear", {"k"}),
    ("ssd", set()),
    ("differential", set()),
    ("shared_kv", {"t"}),  # it reuses K and V: no cache of its own to replay; its map tiles as any softmax
    ("dsa", set()),
])
def test_the_next_line_offers_only_views_that_show_something(name: str, keys: set[str]) -> None:
    presenter = Presenter(compute(load_scenario(name)))
    line = next_line(presenter)
    assert offered(line) == keys, line
    assert line.endswith("home then p to predict every result")
    for view in SIDE_VIEWS:
        if view.closing and view.applies is None:
            # every key offered opens a view with steps; every key left out opens the line that says why not
            assert (first_screen(presenter, view.key) not in WHY_NOT) == (view.key in keys), (name, view.key)
