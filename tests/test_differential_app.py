"""The app on the built-in differential at 80×24: every operation stepped through without a crash, each stage of
the two maps reached, the tiles and cache views refusing in one line, and the heads view showing a negative weight
with its sign (not as a masked cell)."""

from __future__ import annotations

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.display.heads_grid import MASKED, MINUS, NEGATIVE, HeadMap, HeadsGrid, glyph
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .test_app import text_of

STAGES = ("Score₁", "Scale₁", "Softmax₁", "Score₂", "Scale₂", "Softmax₂", "λ", "Subtract", "Mix", "Sub-norm",
          "1 − λ_init", "Concat")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("differential")
    seen: set[str] = set()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        count = int(text_of(app, FormulaLine).split("op 1/")[1].split()[0])  # "op 1/286"
        for _ in range(count - 1):
            await pilot.press("right")
            line = text_of(app, FormulaLine)
            seen.update(s for s in STAGES if f" {s} ·" in line)
            assert text_of(app, ExplainPanel).strip()
        assert app.position.index == count - 1 and f"op {count}/{count}" in text_of(app, FormulaLine)
        # a storm over the stages: back and forth, heads, the side views and out again
        for key in ("home", "right_square_bracket", "tab", "right_square_bracket", "left", "t", "t", "k", "k",
                    "v", "right", "enter", "end", "left_square_bracket", "p", "escape", "m", "escape"):
            await pilot.press(key)
    assert seen == set(STAGES)


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    app = QKVApp("differential")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        assert "No tiles for differential attention" in text_of(app, ExplainPanel)
        await pilot.press("t", "k")
        assert "No KV-cache replay for differential attention" in text_of(app, ExplainPanel)


def test_a_negative_weight_keeps_its_sign_in_the_heads_grid() -> None:
    comp = compute(load_scenario("differential"))
    tilted = comp.heads[1].weights
    assert tilted[1, 0] < 0  # cat → the, in the tilted head
    sc = comp.scenario
    grid = HeadsGrid(tuple(HeadMap(h.name, h.weights, "", "") for h in comp.heads), sc.allow, sc.labels,
                     sc.key_labels)
    cells = grid.cells(1, sc.n, sc.m)
    assert cells.levels[1][0] == NEGATIVE and glyph(NEGATIVE, 2) == MINUS * 2
    assert cells.levels[0][1] == -1 and glyph(-1, 2).strip() == MASKED  # a masked cell stays the dot
    plain = grid.cells(0, sc.n, sc.m)  # no negative weight in the plain head: no minus either
    assert np.all(comp.heads[0].weights[sc.allow] >= 0) and NEGATIVE not in {v for row in plain.levels for v in row}
