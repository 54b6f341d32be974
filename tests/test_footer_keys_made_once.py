"""The footer's keys are made once on the way to the first frame (widgets/panels.py KeyFooter): composed before the
app's mount with the keys the mount turns on, the footer is not composed again when the mount refreshes the
bindings (Textual's composes empty, then again after the first frame, which laid the screen out twice more;
start-up: benchmarks/bench.py --startup-only)."""

from __future__ import annotations

import asyncio

from textual.widgets._footer import FooterKey

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import KeyFooter


def recomposed(keys: tuple[str, ...] = ()) -> tuple[int, int, list[str]]:
    """How often the footer was composed again by the first frame and after pressing ``keys``, and the actions of
    the keys it shows at the end."""
    count = [0]
    recompose = KeyFooter.recompose

    async def counted(self: KeyFooter) -> None:
        count[0] += 1
        await recompose(self)

    counts: list[int] = []
    shown: list[str] = []

    async def run() -> None:
        app = QKVApp("i_love_ai")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            counts.append(count[0])
            shown.extend(str(key.action) for key in app.screen.query(FooterKey))
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            counts.append(count[0])

    KeyFooter.recompose = counted  # type: ignore[method-assign]
    try:
        asyncio.run(run())
    finally:
        KeyFooter.recompose = recompose  # type: ignore[method-assign]
    return counts[0], counts[1], shown


def test_the_first_frames_footer_is_composed_once() -> None:
    first, _, shown = recomposed()
    assert "next" in shown and "quit" in shown, "the first frame's footer shows its keys"
    assert first == 0


def test_the_footer_is_composed_again_when_the_bindings_change() -> None:
    """The check above can fail: at the last step → and the others that move on are greyed, and the footer is
    composed again."""
    first, then, _ = recomposed(("end",))
    assert first == 0
    assert then > 0
