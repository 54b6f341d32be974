"""The app on the built-in ssd at 80×24: every operation stepped through without a crash, each of [ssd]'s stages
reached (and no Project, Score or Softmax), the tiles and cache views refusing in one line."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp

from .app_walk import stages_seen, step_through, storm, tiles_and_cache

STAGES = ("Steps", "Recurrence", "Mask L", "Map", "Attention", "Agree", "Gate", "Norm", "Concat")


async def test_every_operation_steps_at_80x24() -> None:
    app = QKVApp("ssd")
    async with app.run_test(size=(80, 24)) as pilot:
        said = await step_through(app, pilot)
        await storm(pilot)
    assert set(stages_seen(said, (*STAGES, "Project", "Score", "Softmax"))) == set(STAGES)


async def test_tiles_and_cache_refuse_in_one_line() -> None:
    tiles, cache = await tiles_and_cache("ssd")
    assert "No tiles for [ssd]" in tiles
    assert "No KV-cache replay for [ssd]" in cache
