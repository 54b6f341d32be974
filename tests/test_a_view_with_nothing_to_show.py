"""A side view with nothing to show for the scenario, only the line that says why (a part refuses it:
display/refused_view.py; a state has no tiles), kept the trace's footer: on [ssd] k's screen offered → ← tab p,
→ did nothing, p started a quiz with nothing to predict, Esc did not leave. There only its own key (to leave),
help and quit are offered, p does nothing, and Esc leaves it as it leaves the heads view."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import KeyFooter

from .settle import settle


def footer_keys(app: QKVApp) -> set[str]:
    return {w.key_display for w in app.query_one(KeyFooter).children if hasattr(w, "action")}


@pytest.mark.parametrize(("name", "key", "view", "footer"), [
    ("ssd", "k", "cache", {"k", "?", "^p", "q"}),  # t's view says "not shown" as well: not offered from here
    ("shared_kv", "k", "cache", {"k", "?", "^p", "q"}),  # its tiles show: t is offered, and acts
    ("differential", "t", "tiles", {"t", "?", "^p", "q"}),
    ("kda", "t", "tiles", {"t", "k", "?", "^p", "q"}),  # no tiles for a state; k steps through the state
])
async def test_only_the_keys_that_act_and_esc_leaves(name: str, key: str, view: str, footer: set[str]) -> None:
    app = QKVApp(name)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        await pilot.press(key)
        await settle(pilot)
        assert app.modes.view == view
        assert app.presenter.frame(app.position, app.modes).explanation.stage_label in ("not shown", "no tiles")
        shown = footer_keys(app)
        if name == "shared_kv":
            footer = footer | {"t"}
        assert shown == footer, shown
        for press in ("right", "p", "tab", "down", "end"):
            await pilot.press(press)
            await settle(pilot)
        assert app.modes.view == view and app.modes.side_step == 0 and app.position.head == 0
        assert app.modes.quiz is None and app.modes.question is None
        await pilot.press("escape")
        await settle(pilot)
        assert app.modes.view == "trace"


async def test_esc_still_leaves_no_view_that_shows_something() -> None:
    """The cache view of the seed shows its steps: Esc there is the quiz's (reveal, leave the quiz), as before."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        await pilot.press("k")
        await settle(pilot)
        assert {"→", "p", "k"} <= footer_keys(app)
        await pilot.press("escape")
        await settle(pilot)
        assert app.modes.view == "cache"
