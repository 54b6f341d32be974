"""What a reviewer found the screens saying that the numbers beside them did not (a fourth round of truth):

- the closing check of a differential head said "every weight row sums to 1 (to within 2e-01)": its rows sum to
  1 − λ, and are checked against that;
- a narrowed pane title dropped a factor in brackets: "output = (1 − λ_init)·normed" read "output =·normed";
- the heads view: the differential formula lost its brackets (V seemed to multiply the second map alone), its
  legend had no mark for the negative weights it drew, an [ssd] head was said to have its own W_Q (it reads none),
  and the view opened on head 1 whatever head the trace was on;
- a file that sets its own divisor (Gemma 3n's scale = 1) was introduced as softmax(QKᵀ/√dₖ)V."""

from __future__ import annotations

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core import part_questions as ask
from qkv_tui.display.heads_view import _formula, _frame, grid
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.text import title_variants
from qkv_tui.teach.summary import checks
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.heads import legend


def test_a_differential_heads_rows_are_checked_against_one_minus_lambda() -> None:
    comp = compute(load_scenario("differential"))
    for hr in comp.heads:
        line = checks(hr, comp.scenario.allow)
        total = hr.weights.sum(axis=1)
        assert abs(total - ask.row_total(hr)).max() < 1e-12  # the rows' own sums, independent of the line
        assert "sums to 1 − λ = " in line and "to within 2e-01" not in line, line
    plain = compute(load_scenario("i_love_ai"))
    assert "every weight row sums to 1 (" in checks(plain.heads[0], plain.scenario.allow)


def test_a_narrowed_title_keeps_a_bracketed_factor() -> None:
    variants = title_variants("output = (1 − λ_init)·normed  3×4")
    assert all("=·" not in v for v in variants), variants
    assert "output=(1 − λ_init)·normed 3×4" in variants
    assert "X 3×2" in title_variants("X (embeddings)  3×2")  # a remark in brackets still goes


def test_the_heads_view_writes_the_differential_map_whole_and_marks_negative_weights() -> None:
    presenter = Presenter(compute(load_scenario("differential")))
    formula = "".join(text for text, _ in _formula(presenter.comp))
    assert formula.startswith("(softmax(") and formula.endswith("))·V"), formula
    assert "below 0" in legend(grid(presenter, Modes()))
    assert "below 0" not in legend(grid(Presenter(compute(load_scenario("i_love_ai"))), Modes()))


def test_an_ssd_head_is_not_said_to_have_its_own_w_q() -> None:
    presenter = Presenter(compute(load_scenario("ssd")))
    meaning = _frame(presenter, Modes(view="heads"), 0, 0).explanation.meaning
    assert "W_Q" not in meaning and "A and dt" in meaning, meaning
    plain = Presenter(compute(load_scenario("two_heads")))
    assert "its own W_Q" in _frame(plain, Modes(view="heads"), 0, 0).explanation.meaning


def test_a_files_own_divisor_is_the_one_the_page_and_the_heads_view_name() -> None:
    comp = compute(load_scenario("shared_kv"))
    assert ask.lead(comp.scenario)[1] == "softmax(QKᵀ/1)V"
    assert _formula(comp)[0][0] == "softmax(Q·Kᵀ/1)"
    assert ask.lead(load_scenario("i_love_ai"))[1] == "softmax(QKᵀ/√dₖ)V"


@pytest.mark.app
async def test_the_heads_view_opens_on_the_traces_head() -> None:
    app = QKVApp("shared_kv")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "tab")
        await pilot.pause()
        assert app.position.head == 1
        await pilot.press("v")
        await pilot.pause()
        assert app.modes.view == "heads" and app.modes.side_step == 1
