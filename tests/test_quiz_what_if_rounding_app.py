"""The extras driven by Pilot (the cache and tiled views: tests/test_views_app.py): quiz, what-if, hand rounding, decimals."""

from __future__ import annotations

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def pane(app: QKVApp, key: str) -> MatrixView:
    return next(v for v in app.query(MatrixView) if v.display and v.spec is not None and v.spec.key == key)


async def test_quiz_round_through_a_whole_stage() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "left", "p")  # just before the Score stage
        for _ in range(9):
            await pilot.press("right")
            question = app.modes.question
            assert question is not None and question.kind == "value"
            assert "= ?" in explanation(app)  # the result is hidden until answered
            target = pane(app, "scores@0").spec
            assert target.hide_current
            answer = str(int(question.value))
            for ch in answer:
                await pilot.press(ch)
            await pilot.press("enter")
            assert app.modes.question is None and app.modes.message.startswith("Right")
        assert str(app.modes.quiz) == "9/9 right"
        assert app.position.index == 38


async def test_quiz_wrong_and_kind_answers() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "p", "right")  # asks for Q[I,1]
        assert app.modes.question is not None
        await pilot.press("enter")  # empty
        assert app.modes.question is not None and "Type your prediction" in app.modes.message
        await pilot.press("1", "e", "enter")  # half a number (other letters are keys: the box does not take them)
        assert app.modes.question is not None and "is not a number" in app.modes.message
        await pilot.press("7", "enter")
        assert app.modes.message == "Not quite: you said 7, the value is 0."
        assert str(app.modes.quiz) == "0/1 right"
        await pilot.press("right", "escape")  # ask, then reveal without scoring
        assert app.modes.question is None and app.modes.message.startswith("Revealed")
        assert str(app.modes.quiz) == "0/1 right"
        await pilot.press("escape")  # nothing pending: leave the quiz
        assert app.modes.quiz is None


async def test_quiz_asks_which_key_wins_at_softmax() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", "left", "p", "right")
        assert app.modes.question is not None and app.modes.question.kind == "argmax"
        for ch in "love":
            await pilot.press(ch)
        await pilot.press("enter")
        assert app.modes.message.startswith("Right: love gets the largest weight")
        assert app.modes.question is not None and app.modes.question.kind == "value"  # then the value itself


async def test_what_if_hand_and_decimals() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4", "right", "w")
        text = explanation(app)
        assert "what if, row I" in text and "0.000 1.000 0.000 1.000" in text
        assert "     I  love    AI   max |     I  love    AI   max" in text  # the keys head their columns
        await pilot.press("w", "plus")
        assert app.modes.decimals == 4 and "scaled[I,love] = 5 / √3 = 2.8868" in explanation(app)
        await pilot.press("minus", "minus", "minus", "minus", "minus")
        assert app.modes.decimals == 1  # never below one: at 0 a weight row reads 0 0 0
        await pilot.press("equals_sign", "equals_sign", "6", "right", "right", "right", "h")
        assert app.modes.hand
        assert "hand rounding: out[love,0] = 0.999 by hand, but 1.000 exactly" in explanation(app)
        assert "by hand" in str(app.query_one(FormulaLine).render())
        await pilot.press("h")
        assert "hand rounding" not in explanation(app)


def test_a_half_is_right_for_neither_whole_number() -> None:
    from qkv_tui.teach.quiz import check_number

    for value in (0.0, 1.0):
        assert check_number("0.5", value, integral=True, decimals=3).right is False
    assert check_number("1", 1.0, integral=True, decimals=3).right is True
    assert check_number("1.0", 1.0, integral=True, decimals=3).right is True
    assert check_number("-0", 0.0, integral=True, decimals=3).right is True
    # decimals: right when it shows as the cell does, so one answer never fits two shown values
    weight = 0.70710678
    assert check_number("0.707", weight, integral=False, decimals=3).right is True
    assert check_number("0.7068", weight, integral=False, decimals=3).right is True
    assert check_number("0.7064", weight, integral=False, decimals=3).right is False
    assert check_number(".71", weight, integral=False, decimals=2).right is True
    assert check_number("−∞", float("-inf"), integral=False, decimals=3).right is True
    assert check_number("1e999", 2.0, integral=True, decimals=3).right is False


async def test_skipping_a_question_clears_what_was_typed() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "left", "p", "right")  # asks for scores[I,I]
        first = app.modes.question
        assert first is not None
        await pilot.press("4")  # typed, not submitted
        field = app.query_one("#quiz-input")
        assert field.value == "4"
        await pilot.press("right")  # skip: the next question gets an empty box
        assert app.modes.question is not None and app.modes.question is not first
        assert field.value == ""
        await pilot.press("enter")  # nothing typed: a hint, and nothing scored
        assert str(app.modes.quiz) == "0/0 right" and "Type your prediction" in app.modes.message
        await pilot.press("9", "left")  # moving back also drops the typed text
        assert field.value == ""


async def test_what_if_waits_for_the_scores() -> None:
    """Before a row's scores exist, the table would show numbers from the future: it says so instead."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2", "w")
        assert "appears once its scores are all computed" in explanation(app)
        assert "max |" not in explanation(app)
        await pilot.press("3", "right", "right")  # scores[I] complete
        assert "what if, row I" in explanation(app)


def test_what_if_never_shows_nan_for_finite_scores() -> None:
    """Scores near the float limit, stretched by √f for a wider head, overflowed to inf, and inf − inf is NaN.

    Every case here passes the loader's check (all of the engine's matrices are finite).
    """
    import math

    import numpy as np

    from qkv_tui.core.scenario import parse_scenario
    from qkv_tui.display.view import whatif_lines

    for scale, x in ((1.0, 1.2e154), (1e-3, 1e152), (1e-300, 1e-5), (2.0, 1.3e154)):
        text = (f'tokens = ["a", "b", "c"]\nX = [[{x!r}], [{-x!r}], [0.5]]\nscale = {scale!r}\n'
                "[[heads]]\nW_Q = [[1.0]]\nW_K = [[1.0]]\nW_V = [[1.0]]\n")
        comp = QKVApp(parse_scenario(text, "big.toml")).comp
        head = comp.heads[0]
        for row in range(3):
            lines = whatif_lines(head, comp.allow, row, "a", ("a", "b", "c"), 3)
            assert not any("nan" in line for line in lines), (scale, x, lines)
        from qkv_tui.teach.whatif import what_if

        for r in what_if(head, comp.allow, 0):
            for weights in (r.scaled, r.unscaled):
                assert np.isfinite(weights).all() and math.isclose(weights.sum(), 1.0)
