"""Walking the app over a built-in at 80×24, as the tests of the parts with stages of their own do: every operation
stepped through, a storm of keys over the views after it, and what the tiles and cache views say."""

from __future__ import annotations

from typing import Any

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .test_app import text_of

# back and forth, the next head, the side views and out again
STORM = ("home", "right_square_bracket", "tab", "right_square_bracket", "left", "t", "t", "k", "k", "v", "right",
         "enter", "end", "left_square_bracket", "p", "escape", "m", "escape")


async def step_through(app: QKVApp, pilot: Any) -> list[tuple[str, str]]:
    """Every operation after the first, one right arrow each: the formula line and the explain panel after each
    step (the panel never empty), ending on the last operation."""
    await pilot.pause()
    count = int(text_of(app, FormulaLine).split("op 1/")[1].split()[0])  # "op 1/286"
    said = []
    for _ in range(count - 1):
        await pilot.press("right")
        line, explained = text_of(app, FormulaLine), text_of(app, ExplainPanel)
        assert explained.strip()
        said.append((line, explained))
    assert app.position.index == count - 1 and f"op {count}/{count}" in text_of(app, FormulaLine)
    return said


async def storm(pilot: Any, keys: tuple[str, ...] = STORM) -> None:
    """Each key pressed on its own, the screen settling after each (``pilot.press(*keys)`` waits once, at the end)."""
    for key in keys:
        await pilot.press(key)


def stages_seen(said: list[tuple[str, str]], stages: tuple[str, ...]) -> list[str]:
    """The stages the formula lines name, in the order the steps reach them, each run of one stage once."""
    seen: list[str] = []
    for line, _ in said:
        seen += [s for s in stages if f" {s} ·" in line and (not seen or seen[-1] != s)]
    return seen


async def tiles_and_cache(name: str) -> tuple[str, str]:
    """What the explain panel says on built-in ``name``'s tiles view, then on its KV-cache view."""
    app = QKVApp(name)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("t")
        tiles = text_of(app, ExplainPanel)
        await pilot.press("t", "k")
        return tiles, text_of(app, ExplainPanel)
