"""Presenting to a room: f puts the prose away (then all but the stage bar), escape closes toasts,
the tiles and cache views ask the quiz's questions, and a question left is said to be left."""

from __future__ import annotations

import pytest

from qkv_tui.app import QKVApp
from qkv_tui.display.presenting import BLANK_HINT
from qkv_tui.display.tiled_view import MEANING
from qkv_tui.teach.quiz import about_line
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine
from tests.settle import settle

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def shown_panes(app: QKVApp) -> list[MatrixView]:
    return [view for view in app.query(MatrixView) if view.display and view.spec is not None]


# --- f: the prose, then everything but the stage bar ------------------------------------------------


async def test_f_hides_the_prose_then_blanks_the_screen_then_brings_it_back() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        meaning = app.trace.meaning("score", 0)
        before = explanation(app)
        assert meaning in before
        height = app.query_one("#focus").styles.height
        await pilot.press("f")
        hidden = explanation(app)
        assert meaning not in hidden and hidden.splitlines()[0] == before.splitlines()[0]  # the working stays
        assert "prose hidden (f)" in str(app.query_one(FormulaLine).render())
        assert app.query_one("#focus").styles.height.value >= height.value  # the panes get the room
        await pilot.press("right")  # stepping keeps it hidden
        assert app.modes.prose == "hidden" and meaning not in explanation(app)
        await pilot.press("f")
        assert explanation(app) == BLANK_HINT and not shown_panes(app)
        assert "3 Score" in str(app.query_one("#stagebar").render())  # where the class is stays in view
        await pilot.press("f")
        assert app.modes.prose == "shown" and meaning in explanation(app) and shown_panes(app)


async def test_hidden_prose_leaves_out_the_description_on_the_first_screen() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        description = app.scenario.description.split("\n")[0]
        assert description in explanation(app)
        await pilot.press("f")
        assert description not in explanation(app)


async def test_f_works_in_the_side_views() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t", "f")
        assert "running max" not in explanation(app) and explanation(app).startswith("S[I]")
        await pilot.press("f")
        assert explanation(app) == BLANK_HINT and not shown_panes(app)


# --- escape closes a toast before it reveals -------------------------------------------------------


async def test_escape_closes_the_toasts_first_then_reveals() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.press("2", "p", "right")
        assert app.modes.question is not None
        app.notify("a toast")
        await settle(pilot)
        assert app.live.toasts() == 1
        await pilot.press("escape")
        await settle(pilot)
        assert app.live.toasts() == 0 and app.modes.question is not None  # the toast went, the question waits
        await pilot.press("escape")
        assert app.modes.question is None and app.modes.message == "Revealed, not scored."


async def test_a_click_closes_a_toast() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        app.notify("a toast", timeout=30)
        await settle(pilot)
        toast = app.screen.query_one("Toast")
        await pilot.click(toast)
        await settle(pilot)
        assert app.live.toasts() == 0


# --- the quiz in the tiles and cache views ------------------------------------------------------------


def test_a_side_views_line_asks_for_its_result_or_its_rows_first_entry() -> None:
    q = about_line(2, "m[I] = max(m_old, m̃) = max(−∞, 2.887) = 2.887", "tiles")
    assert q is not None and q.target == "m[I]" and q.value == 2.887 and q.decimals == 3 and q.side == "tiles"
    assert q.arithmetic == "m[I] = max(m_old, m̃) = max(−∞, 2.887) = ?"
    assert q.check("2.887").right and q.check("2.8872").right and not q.check("2.886").right
    row = about_line(0, "S[I] = Q[I]·K[I..love]ᵀ/√3 = [1, 5]/√3 = [0.577, 2.887]; with the mask: [0.577, −∞]", "tiles")
    assert row is not None and row.target == "the first entry of S[I]" and row.value == 0.577
    assert row.arithmetic == "S[I] = Q[I]·K[I..love]ᵀ/√3 = [1, 5]/√3 = ?"  # the masked row would give it away
    whole = about_line(3, "α[I] = e^(m_old − m) = e^(−∞) = 0; nothing gathered yet: ℓ and Õ are still 0", "tiles")
    assert whole is not None and whole.integral and whole.check("0").right and not whole.check("0.0001").right
    assert about_line(0, "Q[I..love] = X·W_Q: 2 rows at once, fresh (the q pane)", "cache") is None
    assert about_line(1, "p = 0 for every key of this tile for I: the mask allows I none of AI", "tiles") is None


async def test_the_tiles_view_asks_the_number_it_computes_next_and_grades_it() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t", "p")
        assert app.modes.asking and app.query_one("#quizbar").display
        await pilot.press("right")  # op 2: the tile's row max
        question = app.modes.question
        assert question is not None and question.side == "tiles" and question.index == 1
        assert explanation(app).splitlines()[:2] == ["m̃[I] = max(0.577, 2.887) = ?", MEANING["tile_max"]]
        assert "2.887" not in "".join(str(view.spec.values) for view in shown_panes(app) if view.spec.key == "t_ml")
        await pilot.press(*"2.887", "enter")
        assert app.modes.message == "Right: 2.887." and str(app.modes.quiz) == "1/1 right"
        assert app.modes.question is None and explanation(app).startswith("m̃[I] = max(0.577, 2.887) = 2.887")
        await pilot.press("right", *"3", "enter")  # m[I] = 2.887, not 3
        assert app.modes.message == "Not quite: you said 3, the value is 2.887." and str(app.modes.quiz) == "1/2 right"


async def test_the_cache_view_asks_for_the_steps_weights() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k", "p", "right")
        question = app.modes.question
        assert question is not None and question.target == "the first entry of weights[AI]"
        lines = explanation(app).splitlines()
        assert lines[-2] == "weights[AI] = softmax([1.155, 2.309, 1.732]) = ?"  # then what the view means
        assert not any(line.startswith("out[AI]") for line in lines)  # the output would give the weights away
        await pilot.press(*"0.168", "enter")
        assert app.modes.message == "Right: 0.168." and str(app.modes.quiz) == "1/1 right"


async def test_the_quiz_asks_in_the_view_it_was_switched_on_in() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("p", "t")  # switched on in the trace: the tiles view steps without asking
        assert not app.modes.asking and not app.query_one("#quizbar").display
        await pilot.press("right")
        assert app.modes.question is None
        await pilot.press("p")  # here too now, with the same score
        assert app.modes.asking and app.modes.quiz_view == "tiles"
        assert "on in the tiles view" in app.modes.message


# --- p, and moving away, with a question pending ----------------------------------------------------


async def test_p_with_a_question_pending_leaves_the_quiz_and_says_what_became_of_the_question() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.press("2", "p", "right")
        assert app.modes.question is not None
        await pilot.press("p")
        assert app.modes.quiz is None and app.modes.question is None
        messages = [n.message for n in app._notifications]
        assert messages == ["Predict-then-reveal is off: Q[I,1] left unanswered, not scored (0/0 right)."]


@pytest.mark.parametrize("keys", [["left"], ["right_square_bracket"], ["end"], ["g", "1", "enter"], ["k"], ["t"]])
async def test_moving_away_from_a_question_says_it_was_left(keys: list[str]) -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2", "p", "right")
        await pilot.press(*keys)
        assert app.modes.question is None and app.modes.message == "Q[I,1] left unanswered, not scored."
        assert str(app.modes.quiz) == "0/0 right"


async def test_stepping_on_past_a_question_says_so_and_asks_the_next() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2", "p", "right", "right")
        assert app.modes.question is not None and app.modes.question.target == "Q[I,2]"
        assert app.modes.message.startswith("Q[I,1] left unanswered, not scored. esc reveals")


async def test_leaving_a_side_views_question_says_so() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t", "p", "right", "left")
        assert app.modes.question is None and app.modes.message == "m̃[I] left unanswered, not scored."


# --- snapshots ----------------------------------------------------------------------------------------


class TestPresentingSnapshots:
    @SIZES
    def test_prose_hidden(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["3", "right", "f"], terminal_size=size)

    @SIZES
    def test_tiles_quiz(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("i_love_ai"), press=["t", "right", "p", "right"], terminal_size=size)
