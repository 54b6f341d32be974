"""The app on the built-in ssd at 80×24: every operation stepped through without a crash, each of [ssd]'s stages
reached (and no Project, Score or Softmax), the tiles and cache views refusing in one line."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .test_app import text_of

STAGES = ("Steps", "Recurrence", "Mask L", "Map", "Attention", "Agree", "Gate", "Norm", "Concat")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("ssd")
    seen: set[str] = set()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        count = int(text_of(app, FormulaLine).split("op 1/")[1].split()[0])
        for _ in range(count - 1):
            await pilot.press("right")
            line = text_of(app, FormulaLine)
            seen.update(s for s in (*STAGES, "Project", "Score", "Softmax") if f" {s} ·" in line)
            assert text_of(app, ExplainPanel).strip()
        assert app.position.index == count - 1 and f"op {count}/{count}" in text_of(app, FormulaLine)
        for key in ("home", "right_square_bracket", "tab", "right_square_bracket", "left", "t", "t", "k", "k",
                    "v", "right", "enter", "end", "left_square_bracket", "p", "escape", "m", "escape"):
            await pilot.press(key)
    assert seen == set(STAGES)


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    app = QKVApp("ssd")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        assert "No tiles for [ssd]" in text_of(app, ExplainPanel)
        await pilot.press("t", "k")
        assert "No KV-cache replay for [ssd]" in text_of(app, ExplainPanel)
