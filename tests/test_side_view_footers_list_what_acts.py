"""A side view's footer lists only the keys that act there (display/side_view.key_state): the heads view of
hand-made numbers listed tab, ] and p, the Train and cache views ↓ and ], none of which did anything there.
A key that acts in the view but not just now (] at a model's last layer, ← at the first step) stays greyed."""

from __future__ import annotations

import pytest

from qkv_tui.display import decode_view, heads_view, tiled_view, train_view
from qkv_tui.display.side_view import SideView, key_state
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import KeyFooter

from .settle import settle


def never(action: str, parameters: tuple[object, ...]) -> bool:
    return False


def only(*acting: tuple[str, tuple[object, ...]]):
    return lambda action, parameters: (action, parameters) in acting


@pytest.mark.parametrize("view", [decode_view.VIEW, tiled_view.VIEW, train_view.VIEW, heads_view.VIEW])
def test_keys_a_view_gives_no_meaning_are_left_out(view: SideView) -> None:
    for action, parameters in (("row", (1,)), ("next_stage", ()), ("prev_stage", ()), ("whatif", ()), ("goto", ())):
        assert key_state(view, action, parameters, never) is False
    assert key_state(view, "next", (), never) is True  # → ← and the rest are the view's own: decided elsewhere


def test_a_key_that_acts_the_other_way_is_greyed_not_left_out() -> None:
    view = heads_view.VIEW
    last_layer = only(("prev_stage", ()))  # at a model's last layer only [ moves
    assert key_state(view, "next_stage", (), last_layer) is None
    assert key_state(view, "prev_stage", (), last_layer) is True
    top_row = only(("row", (1,)))
    assert key_state(view, "row", (-1,), top_row) is None and key_state(view, "row", (1,), top_row) is True


def test_the_heads_view_has_no_trace_head_and_no_quiz() -> None:
    assert key_state(heads_view.VIEW, "head", (1,), never) is False
    assert key_state(heads_view.VIEW, "quiz", (), never) is False
    assert key_state(decode_view.VIEW, "head", (1,), never) is True  # the cache is the trace head's
    assert key_state(tiled_view.VIEW, "quiz", (), never) is True


def footer_keys(app: QKVApp) -> set[str]:
    return {w.key_display for w in app.query_one(KeyFooter).children if hasattr(w, "action")}


@pytest.mark.parametrize(("name", "key", "absent", "present"), [
    ("gqa", "v", {"tab", "]", "p", "↓"}, {"→", "←", "?", "q"}),  # four maps in one row: ↓ has nowhere to go
    ("glassllm_previous_word", "v", {"tab", "p"}, {"]", "→"}),  # a model: ] walks its layers
    ("learn_to_look", "l", {"↓", "]"}, {"→", "p"}),
    ("gqa", "k", {"↓", "]"}, {"→", "tab", "p"}),
    ("gqa", "t", {"↓", "]"}, {"→", "tab", "p"}),
])
async def test_the_footer_of_each_side_view(name: str, key: str, absent: set[str], present: set[str]) -> None:
    app = QKVApp(name)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        trace = footer_keys(app)
        assert {"↓", "]"} <= trace
        await pilot.press(key)
        await settle(pilot)
        shown = footer_keys(app)
        assert app.modes.view != "trace"
        assert not absent & shown, absent & shown
        assert present <= shown, present - shown
