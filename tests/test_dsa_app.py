"""The app on the built-in dsa at 80×24: every operation stepped through without a crash, the Index and Select
stages reached before the head's, Scale saying which keys the indexer dropped, and the tiles and cache views
refusing in one line."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .test_app import text_of

STAGES = ("Index", "Select", "Project", "Score", "Scale", "Softmax", "Mix")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("dsa")
    seen: list[str] = []
    dropped = False
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        count = int(text_of(app, FormulaLine).split("op 1/")[1].split()[0])
        for _ in range(count - 1):
            await pilot.press("right")
            line = text_of(app, FormulaLine)
            explained = text_of(app, ExplainPanel)
            assert explained.strip()
            seen += [s for s in STAGES if f" {s} ·" in line and (not seen or seen[-1] != s)]
            dropped = dropped or ("indexer:" in explained and "not selected, so masked" in explained)
        assert app.position.index == count - 1 and f"op {count}/{count}" in text_of(app, FormulaLine)
        for key in ("home", "right_square_bracket", "right_square_bracket", "left", "t", "t", "k", "k", "v",
                    "right", "enter", "end", "left_square_bracket", "p", "escape", "m", "escape"):
            await pilot.press(key)
    assert seen == list(STAGES)  # the layer's Index and Select first, then the head's
    assert dropped  # Scale names the indexer as the reason a visible key is masked


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    app = QKVApp("dsa")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        assert "No tiles for sparse attention" in text_of(app, ExplainPanel)
        await pilot.press("t", "k")
        assert "No KV-cache replay for sparse attention" in text_of(app, ExplainPanel)


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
