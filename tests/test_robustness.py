"""Odd but valid scenarios at odd sizes: the app must never crash."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from textual.widgets import Input

from qkv_tui.core.scenario import parse_scenario
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView

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
        assert app.query_one("#quiz-input", Input).value == "" and "[/b]" not in app.modes.message  # not an answer: not typed
        await pilot.press("escape", "escape", "g", *"[/b]", "enter", "escape", "k", "right", "tab")
        await pilot.pause()
        screen = app.export_screenshot()
        assert "[/head]" in screen and "[CLS]" in screen  # drawn as typed in the file
    assert app.return_code in (None, 0)


NEAR_MAX = (  # every exact value is finite, but NumPy's round(1e306, 3) scales to 1e309 = inf
    'tokens = ["a", "b"]\nX = [[1e306], [1]]\nscale = 1\n'
    "[[heads]]\nW_Q = [[1]]\nW_K = [[1e-306]]\nW_V = [[1]]\n"
)


async def test_hand_rounding_near_the_float_limit_stays_finite() -> None:
    from qkv_tui.teach.handcalc import compute_hand

    scenario = parse_scenario(NEAR_MAX, "near_max.toml")
    app = QKVApp(scenario)
    for decimals in (0, 3, 8):
        hand = compute_hand(app.comp, decimals)
        for head in hand.heads:
            for name in ("Q", "K", "V", "scores", "scaled", "weights", "output"):
                assert np.isfinite(getattr(head, name)).all(), (decimals, name)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("h", "5", "right", "end", "plus", "plus", "plus", "plus", "plus", "6", "right")
        await pilot.pause()
    assert app.return_code in (None, 0)


def test_the_heat_map_takes_any_float() -> None:
    from qkv_tui.ui.widgets.matrix import heat_style

    ends = ((32, 32, 40), (20, 120, 70))
    for weight in (float("nan"), float("inf"), float("-inf"), -1.0, 2.0, 0.5):
        heat_style(weight, ends)  # round(nan) used to raise ValueError here
    assert heat_style(float("nan"), ends) == heat_style(0.0, ends) and heat_style(3.0, ends) == heat_style(1.0, ends)


def test_control_characters_are_drawn_as_pictures() -> None:
    from qkv_tui.display.text import pictured

    assert pictured("I") == "I" and pictured("猫 é 🙂") == "猫 é 🙂"
    assert pictured("a\nb") == "a␊b"
    assert pictured("\x1b[2J") == "␛[2J"  # no terminal command smuggled in a label
    assert pictured("x\ty\x7f\x85\u2028") == "x␉y␡\ufffd\ufffd"


async def test_control_characters_in_labels_do_not_tear_the_panes() -> None:
    """A newline in a token or head name (from Python, past the loader) stays inside its cell."""
    base = parse_scenario(MARKUP, "labels.toml")
    heads = tuple(replace(h, name=f"head\n{i}") for i, h in enumerate(base.heads))
    tokens = ("new\nline", "tab\there", "esc\x1b[31m")
    scenario = replace(base, tokens=tokens, key_tokens=tokens, heads=heads, title="two\nlines",
                       description="line one\nline two\x07")
    app = QKVApp(scenario)
    async with app.run_test(size=(120, 40)) as pilot:
        for keys in (["right"], ["3", "right"], ["5", "tab"], ["end"], ["home"]):
            await pilot.press(*keys)
            await pilot.pause()
            lines = app.export_screenshot()
            screen = [app.screen.get_widget_at(0, 0)]  # the app still draws
            assert screen and "\x1b[31m" not in lines
            for view in app.query(MatrixView):
                if view.display and view.spec is not None:
                    for y in range(view.size.height):
                        assert len(view.render_line(y).text) == view.size.width  # one screen line each
        assert "new␊line" in app.export_screenshot()
    assert app.return_code in (None, 0)


async def test_a_crash_inside_the_app_gives_a_non_zero_return_code() -> None:
    """App.run() returns after an unhandled exception; the CLI passes app.return_code on as the exit status."""

    class Broken(QKVApp):
        def action_next(self) -> None:
            raise RuntimeError("boom")

    app = Broken("i_love_ai")
    with pytest.raises(RuntimeError):
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("right")
    assert app.return_code == 1
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
    assert app.return_code == 0
