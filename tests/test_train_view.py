"""The Train view (l): one SGD step per keypress on [backward], back with ←, the loss falling on learn_to_look,
the attention map moving; absent from the help, palette and closing line of scenarios without [backward]."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from qkv_tui.core.engine import compute
from qkv_tui.core.scenario import load_scenario
from qkv_tui.display.train_view import train_explanation
from qkv_tui.teach.train_walk import TrainRun
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, QuizInput

from .arith_check import checked

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=lambda s: f"{s[0]}x{s[1]}")


def explanation(app: QKVApp) -> str:
    return app.query_one(ExplainPanel).plain


def shown_panes(app: QKVApp) -> dict[str, MatrixView]:
    return {v.spec.key: v for v in app.query(MatrixView) if v.display and v.spec is not None}


async def test_l_steps_forward_and_back_and_the_map_moves() -> None:
    app = QKVApp("learn_to_look")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        assert "step 0/6" in explanation(app) or "step 0: the file's weights" in explanation(app)
        await pilot.press("right", "right", "right")
        text = explanation(app)
        assert "Δloss = " in text and "the loss fell" in text
        assert "W_K[" in text and " − 0.5·" in text  # the step's biggest updates, worked out
        panes = shown_panes(app)
        now, first = panes["train_P"].spec, panes["train_P0"].spec
        assert not np.allclose(now.values, first.values)
        assert now.changed  # the cells that moved since step 0 are marked
        assert now.values[0].argmax() == 0  # after 3 steps I looks at itself most
        assert first.values[0].argmax() == 1  # at step 0 it looked at love
        await pilot.press("left")
        assert "step 2: the loss fell" in explanation(app)
        await pilot.press("l")  # l again: back to the trace
        assert app.modes.view == "trace"


def test_the_loss_falls_strictly_on_learn_to_look() -> None:
    run = TrainRun(load_scenario("learn_to_look"))
    losses = run.losses(6)
    assert all(b < a for a, b in itertools.pairwise(losses))  # type: ignore[operator]
    assert [s.step for s in (run.at(k) for k in range(7))] == list(range(7))


def test_the_steps_are_core_trainings() -> None:
    from qkv_tui.core.training import steps
    run = TrainRun(load_scenario("learn_to_look"))
    for k, s in enumerate(steps(load_scenario("learn_to_look"))):
        assert np.array_equal(run.at(k).weights[0], s.weights[0]) and run.at(k).loss == s.loss


@pytest.mark.parametrize("decimals", range(1, 9))
def test_every_train_line_checks_out(decimals: int) -> None:
    run = TrainRun(load_scenario("learn_to_look"))
    lines: list[str] = []
    for k in range(len(run)):
        ex = train_explanation(run, k, 0, decimals)
        lines += [ex.arithmetic, *ex.details]
    count, bad = checked([line.strip() for line in lines])
    assert not bad, "\n".join(bad[:10])
    assert count >= 6 * 4  # each step: its Δloss and its three biggest updates


async def test_without_backward_the_view_says_what_it_needs_and_nothing_else_changes() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end")
        assert "Train view" not in explanation(app)  # the closing "Next:" line leaves it out
        await pilot.press("l")
        assert "[backward]" in explanation(app)
    comp = compute(load_scenario("learn_to_look"))
    assert comp.scenario.backward is not None


async def test_the_closing_line_names_the_train_view_where_there_is_backward() -> None:
    app = QKVApp("learn_to_look")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end")
        assert "l the Train view" in explanation(app)


class TestSnapshots:
    @SIZES
    def test_train_view(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("learn_to_look"), press=["l", "right", "right", "right"], terminal_size=size)

    @SIZES
    def test_fa2_backward_tiles(self, snap_compare, size: tuple[int, int]) -> None:
        # the first pair's dS: keys I..love against the block I..love, after the 26 forward operations
        assert snap_compare(QKVApp("learn_to_look"), press=["t", *["right"] * 31], terminal_size=size)


async def test_the_quiz_asks_for_a_gradient_cell_on_a_backward_stage() -> None:
    from qkv_tui.core.fmt import fmt

    app = QKVApp("learn_to_look")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("9", "p", "right")  # dSoftmax: predict a cell of dS = P ⊙ (dP − D)
        field = app.query_one("#quiz-input", QuizInput)
        # under load the question, and the answer box's focus, land some frames later: typed before, the
        # digits would be the app's stage keys
        await _until(pilot, lambda: app.modes.question is not None and field.has_focus)
        question = app.modes.question
        assert question is not None and question.kind == "value"
        assert question.prompt.startswith(("What is d", "What is D[")) and question.arithmetic.endswith("= ?")
        answer = fmt(question.value, question.integral, question.decimals)
        await pilot.press(*answer)
        await _until(pilot, lambda: field.value == answer)
        await pilot.press("enter")
        await _until(pilot, lambda: app.modes.quiz is not None and app.modes.quiz.asked > 0)  # scored
        assert app.modes.quiz is not None and app.modes.quiz.right == 1


async def _until(pilot: Any, ready: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait for a state, not a time: pause until ``ready`` holds (the assertions after it say what it must be)."""
    deadline = time.monotonic() + seconds
    while not ready() and time.monotonic() < deadline:
        await pilot.pause(0.05)
