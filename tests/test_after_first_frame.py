"""ui/app.py's AFTER_FIRST_FRAME: what --serve's forked apps put off until their first frame (the garbage
collector, edges/serve_zygote.py) runs once, after it, and only in the next app."""

from __future__ import annotations

import pytest

from qkv_tui.ui import app as ui_app
from qkv_tui.ui.app import QKVApp


async def test_a_hook_runs_once_after_the_first_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[bool] = []
    monkeypatch.setattr(ui_app, "AFTER_FIRST_FRAME", [])
    app = QKVApp("i_love_ai")
    ui_app.AFTER_FIRST_FRAME.append(lambda: ran.append(app.screen.is_mounted and bool(app.screen._compositor.size)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("right")
        assert ran == [True]
    assert ui_app.AFTER_FIRST_FRAME == []
    async with QKVApp("i_love_ai").run_test(size=(120, 40)) as pilot:
        await pilot.pause()
    assert ran == [True]
