"""The app on the built-in differential at 80×24: every operation stepped through without a crash, each stage of
the two maps reached, the tiles and cache views refusing in one line, and the heads view showing a negative weight
with its sign (not as a masked cell)."""

from __future__ import annotations

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.display.heads_grid import MASKED, MINUS, NEGATIVE, HeadMap, HeadsGrid, glyph
from qkv_tui.ui.app import QKVApp

from .app_walk import stages_seen, step_through, storm, tiles_and_cache

STAGES = ("Score₁", "Scale₁", "Softmax₁", "Score₂", "Scale₂", "Softmax₂", "λ", "Subtract", "Mix", "Sub-norm",
          "1 − λ_init", "Concat")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("differential")
    async with app.run_test(size=(80, 24)) as pilot:
        said = await step_through(app, pilot)
        await storm(pilot)
    assert set(stages_seen(said, STAGES)) == set(STAGES)


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    tiles, cache = await tiles_and_cache("differential")
    assert "No tiles for differential attention" in tiles
    assert "No KV-cache replay for differential attention" in cache


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
