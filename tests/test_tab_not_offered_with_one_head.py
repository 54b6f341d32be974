"""Tab is not offered where there is one head: the footer of [dsa], [kda] and the seed listed ``tab head``,
greyed, for a key that can never act there (Textual's check_action False leaves a binding out). Where there are
two heads it is offered and moves to the other."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import KeyFooter

from .settle import settle


def footer_keys(app: QKVApp) -> set[str]:
    return {w.key_display for w in app.query_one(KeyFooter).children if hasattr(w, "action")}


@pytest.mark.parametrize("name", ["dsa", "kda"])
async def test_one_head_has_no_tab_in_its_footer(name: str) -> None:
    app = QKVApp(name)
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        assert app.stepper.head_count == 1
        assert "tab" not in footer_keys(app)
        assert app.check_action("head", (1,)) is False
        await pilot.press("k")  # nor in a side view that follows the trace's head
        await settle(pilot)
        assert app.modes.view == "cache"
        assert "tab" not in footer_keys(app)


async def test_two_heads_offer_tab_and_it_moves() -> None:
    app = QKVApp("ssd")
    async with app.run_test(size=(200, 40)) as pilot:
        await settle(pilot)
        assert "tab" in footer_keys(app)
        await pilot.press("tab")
        await settle(pilot)
        assert app.position.head == 1
