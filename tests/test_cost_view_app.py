"""The cost view (c) in the app: its roofline page as a snapshot, and its c beside the cache view's own c."""

from __future__ import annotations

import asyncio

from qkv_tui.ui.app import QKVApp


def test_the_roofline_page(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(QKVApp("gqa"), press=["c", "end"], terminal_size=(120, 40))


def test_c_opens_the_cost_view_and_leaves_the_cache_views_c_alone() -> None:
    async def run() -> tuple[str, str, str, str]:
        app = QKVApp("gqa")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("c")
            opened = app.modes.view
            await pilot.press("c")
            left = app.modes.view
            await pilot.press("k", "c")  # in the cache view c picks the next schedule and stays there
            return opened, left, app.modes.view, app.modes.schedule
    opened, left, cache, schedule = asyncio.run(run())
    assert (opened, left, cache) == ("cost", "trace", "cache") and schedule != "prefill"
