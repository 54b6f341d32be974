"""A served app (a browser's tab under --serve) makes its footer's keys at its mount, as Textual's footer does: made
before the mount, as a terminal's app makes them (tests/test_footer_keys_made_once.py), they cost each forked app's
start more than the layouts they save (benchmarks/serve_cost.py: the last of thirty arriving together 6.0× a bare
start-up against 4.9–5.4×, one student 0.33× against 0.28×)."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets._footer import FooterKey

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import KeyFooter


def keys_before_mount(web: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """How many keys the footer composed before the app's mount, and the actions it shows at the first frame."""
    monkeypatch.setattr(QKVApp, "is_web", property(lambda self: web))
    made: list[int] = []
    compose = KeyFooter.compose

    def counted(self: KeyFooter):  # type: ignore[no-untyped-def]
        widgets = list(compose(self))
        if not getattr(self.app, "ready", True):
            made.append(len(widgets))
        yield from widgets

    monkeypatch.setattr(KeyFooter, "compose", counted)
    shown: list[str] = []

    async def run() -> None:
        app = QKVApp("i_love_ai")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            shown.extend(str(key.action) for key in app.screen.query(FooterKey))

    asyncio.run(run())
    return sum(made), shown


def test_a_served_app_makes_its_keys_at_its_mount(monkeypatch: pytest.MonkeyPatch) -> None:
    early, shown = keys_before_mount(True, monkeypatch)
    assert early == 0
    assert "next" in shown and "quit" in shown  # made at the mount all the same


def test_a_terminals_app_makes_them_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: in a terminal the keys are made before the mount."""
    early, shown = keys_before_mount(False, monkeypatch)
    assert early > 0 and "next" in shown
