"""--compare opens the app with a notice (ui/compare_notice.py). Textual runs each class's own on_mount up the
MRO, so the notice's subclass calling super() ran QKVApp.on_mount twice: the file watch started twice and the
first frame's work was done twice. It runs once, and the notice is still shown."""

from __future__ import annotations

import pytest

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.compare_notice import noticed


@pytest.mark.app
async def test_the_app_mounts_once_under_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    mount = QKVApp.on_mount

    def counted(self: QKVApp) -> None:
        calls.append(self)
        mount(self)

    monkeypatch.setattr(QKVApp, "on_mount", counted)
    app = noticed("agree: Score (head 1)")("i_love_ai")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert len(calls) == 1
        assert any("agree: Score" in n.message for n in app._notifications)
