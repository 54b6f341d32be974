"""The app on the built-in dsa at 80×24: every operation stepped through without a crash, the Index and Select
stages reached before the head's, Scale saying which keys the indexer dropped, and the tiles and cache views
refusing in one line."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel

from .app_walk import STORM, stages_seen, step_through, storm, tiles_and_cache

STAGES = ("Index", "Select", "Project", "Score", "Scale", "Softmax", "Mix")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("dsa")
    async with app.run_test(size=(80, 24)) as pilot:
        said = await step_through(app, pilot)
        await storm(pilot, tuple(key for key in STORM if key != "tab"))  # one head: no other to go to
    assert stages_seen(said, STAGES) == list(STAGES)  # the layer's Index and Select first, then the head's
    # Scale names the indexer as the reason a visible key is masked
    assert any("indexer:" in explained and "not selected, so masked" in explained for _, explained in said)


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    tiles, cache = await tiles_and_cache("dsa")
    assert "No tiles for sparse attention" in tiles
    assert "No KV-cache replay for sparse attention" in cache


async def test_what_if_takes_the_softmax_over_the_selected_keys_only() -> None:
    # stage 7 (Softmax), row sat: the indexer dropped "the", so its weight stays 0 in every row of the table
    app = QKVApp("dsa")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7", *["right"] * 8, "w")
        text = app.query_one(ExplainPanel).plain
        assert "what if, row sat" in text
        assert "0.000 0.196 0.804 0.000 0.804 | 0.000 0.119 0.881 0.000 0.881" in text
        await pilot.press("w", "h")  # by hand: the selection made from the scores as written down, the same here
        assert app.modes.hand
        assert "weights[sat,the] = e^−∞ / 1.243 = 0 (masked)" in app.query_one(ExplainPanel).plain
