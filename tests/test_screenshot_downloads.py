"""s under --serve downloads the SVG, as docs/teachers.md says and as ctrl+s's file is: Textual's own
deliver_screenshot asks the browser to open it (open_method "browser", served inline, a new tab)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.app import App

from qkv_tui.ui.app import QKVApp

from .settle import settle


async def test_s_delivers_a_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    delivered: list[dict[str, Any]] = []

    def deliver_text(self: App[object], path_or_file: object, **kwargs: Any) -> str:
        delivered.append(kwargs)
        return "key"

    monkeypatch.setattr(App, "deliver_text", deliver_text)  # QKVApp's own (web fonts out) calls this one
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("s")
        await settle(pilot)
        app.deliver_screenshot()  # the palette's "Save screenshot" goes the same way
    assert len(delivered) == 2
    first, palette = delivered
    assert first["open_method"] == "download" and first["mime_type"] == "image/svg+xml"
    assert first["save_filename"] == "i_love_ai-op01-embed.svg"
    assert palette["open_method"] == "download" and palette["save_filename"].endswith(".svg")
