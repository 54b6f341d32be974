"""Odd but valid scenarios at odd sizes: the app must never crash (contracts §4)."""

from __future__ import annotations

import pytest

from qkv_tui.core.scenario import parse_scenario
from qkv_tui.ui.app import QKVApp

ODD = {
    "one_token_one_dim": 'tokens = ["x"]\nX = [[2]]\n[[heads]]\nW_Q = [[1]]\nW_K = [[1]]\nW_V = [[-3]]\n',
    "long_labels": (
        'tokens = ["a-very-long-token-label-that-goes-on", "b"]\nX = [[1, 2], [3, 4]]\nmask = "causal"\n'
        "[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1]]\nW_V = [[1, 0], [0, 1]]\n"
    ),
    "wide_labels": (
        'tokens = ["猫", "🙂", "é"]\nX = [[1, 0], [0, 1], [1, 1]]\n'
        "[[heads]]\nW_Q = [[1, 0], [0, 1]]\nW_K = [[1, 0], [0, 1]]\nW_V = [[1, 0], [0, 1]]\n"
    ),
    "huge_and_tiny_numbers": (
        'tokens = ["a", "b"]\nX = [[1e6, -2.5e-7], [123456.789, 0.001]]\nscale = 1e5\n'
        "[[heads]]\nW_Q = [[1e-3], [2]]\nW_K = [[1e-3], [1]]\nW_V = [[-1e7], [3]]\n"
    ),
}


@pytest.mark.parametrize("size", [(1, 1), (20, 5), (50, 14), (80, 24), (200, 60)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", sorted(ODD))
async def test_odd_scenarios_never_crash(name: str, size: tuple[int, int]) -> None:
    app = QKVApp(parse_scenario(ODD[name], f"{name}.toml"))
    async with app.run_test(size=size) as pilot:
        for keys in (["end", "home", "right", "right_square_bracket"], ["plus", "h", "w", "left"],
                     ["k", "right", "end", "k"], ["p", "right", "1", "enter", "right", "escape", "escape"],
                     ["minus", "minus", "minus", "minus", "end"]):
            await pilot.press(*keys)
        await pilot.pause()
    assert app.return_code in (None, 0)


MARKUP = '''tokens = ["[CLS]", "[/b]", "x"]
X = [[1, 0], [0, 1], [1, 1]]
[[heads]]
name = "[/head]"
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[1, 0], [0, 1]]
[[heads]]
name = "[b]bold"
W_Q = [[1, 0], [0, 1]]
W_K = [[1, 0], [0, 1]]
W_V = [[1, 0], [0, 1]]
'''


async def test_brackets_in_labels_and_answers_are_text_not_markup() -> None:
    """Textual reads "[...]" in strings as markup; labels and typed answers must show as typed."""
    app = QKVApp(parse_scenario(MARKUP, "markup.toml"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end", "home", "tab", "5", "right", "p", "right", *"[/b]", "enter")
        assert "'[/b]' is not a number" in app.modes.message
        await pilot.press("escape", "escape", "g", *"[/b]", "enter", "escape", "k", "right", "tab")
        await pilot.pause()
        screen = app.export_screenshot()
        assert "[/head]" in screen and "[CLS]" in screen  # drawn as typed in the file
    assert app.return_code in (None, 0)
