"""The command palette's page keys: pressed before its list is laid out they do nothing, never crash the app."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import OptionList

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.palette import Palette, page


class Lists(App[None]):
    def compose(self) -> ComposeResult:
        yield OptionList(*[f"option {i}" for i in range(40)], id="shown")
        hidden = OptionList(*[f"option {i}" for i in range(40)], id="hidden")
        hidden.display = False  # never laid out: it has options but no lines
        yield hidden


async def test_a_page_key_on_a_list_not_laid_out_does_nothing() -> None:
    app = Lists()
    async with app.run_test(size=(40, 12)) as pilot:
        hidden = app.query_one("#hidden", OptionList)
        hidden.highlighted = 5
        assert page(hidden, -1) is False and hidden.highlighted == 5  # Textual alone raises KeyError here
        shown = app.query_one("#shown", OptionList)
        shown.highlighted = 0
        await pilot.pause()
        assert page(shown, 1) is True and shown.highlighted is not None and shown.highlighted > 0


async def test_page_keys_straight_after_opening_the_palette_leave_the_app_running() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p", "pageup", "pagedown", "pageup")
        await pilot.pause()
        assert isinstance(app.screen, Palette)
        await pilot.press("t", "h", "e", "pagedown", "pageup", "escape")
        await pilot.pause()
        assert not isinstance(app.screen, Palette)
    assert app.return_code in (0, None)
