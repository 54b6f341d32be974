"""What a lecture needs: a key that fills a whole row, and a closing summary after the last operation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.summary import checks, closing_summary
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine

from .settle import settle


def plain(lines: tuple[str, ...] | list[str]) -> str:
    return "\n".join(lines).replace("\u00a0", " ")


def test_the_summary_reads_the_seed_numbers() -> None:
    comp = compute(load_scenario("i_love_ai"))
    text = plain(closing_summary(comp, 0, 66, 3))
    assert "all 66 operations" in text
    # the seed page: I puts 0.707 on love, love is uniform, AI puts 0.533 on love
    assert "I → love 0.707; love → 3 keys evenly at 0.333; AI → love 0.533" in text
    assert "every weight row sums to 1" in text


def test_the_summary_follows_the_largest_weight_of_each_row() -> None:
    """For every built-in without ties, the named key is the argmax of the row, found independently."""
    for name in ("two_heads", "causal_mask", "sliding_window", "alibi", "gqa", "rope"):
        comp = compute(load_scenario(name))
        sc = comp.scenario
        for h, head in enumerate(comp.heads):
            line = plain(closing_summary(comp, h, 1, 3)).splitlines()[1]
            items = line.split(": ", 1)[1].split("; ")
            for i, item in enumerate(items[: sc.n]):
                token, _, said = item.partition(" → ")
                assert token == sc.tokens[i]
                row = head.weights[i]
                if "evenly" in said or " and " in said:
                    continue
                key, value = said.rsplit(" ", 1)
                assert key == sc.key_tokens[int(np.argmax(row))], (name, h, item)
                assert abs(float(value) - row.max()) <= 0.0005 + 1e-12


def test_the_checks_can_fail() -> None:
    comp = compute(load_scenario("causal_mask"))
    head = comp.heads[0]
    assert "exactly 0" in checks(head, comp.allow)
    broken = head.weights.copy()
    broken[0, 2] = 0.25  # a weight where the mask forbids one, and a row that no longer sums to 1
    line = checks(replace(head, weights=broken), comp.allow)
    assert "NOT all 0" in line and "to within 2e-01" in line


def test_a_sink_row_sums_with_its_share() -> None:
    comp = compute(load_scenario("sink"))
    assert comp.heads[0].weights.sum(axis=1).max() < 1  # the sink takes a share
    assert "plus its sink's share sums to 1" in checks(comp.heads[0], comp.allow)


def test_the_summary_is_shown_only_after_the_last_operation_and_not_while_predicting() -> None:
    comp = compute(load_scenario("two_heads"))
    presenter = Presenter(comp)
    last = len(presenter.exact) - 1
    assert not any("✓ Done" in n for n in presenter.frame(Position(last - 1, 0), Modes()).notes)
    notes = presenter.frame(Position(last, 1), Modes()).notes
    assert "✓ Done" in notes[0] and "head 2 (2/2)" in notes[1] and notes[-1].startswith("Next: ")
    from qkv_tui.teach.quiz import Score, questions

    asked = questions(presenter.exact, last, 3)[0]
    hidden = presenter.frame(Position(last, 0), Modes(quiz=Score(), question=asked))
    assert not any("✓ Done" in n for n in hidden.notes)  # the summary would give the answer away


async def test_down_and_up_step_whole_rows_in_the_app() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("right", "right", "right", "right")  # Q[I,0] is op 4, Q[I,1] op 5
        assert app.position.index == 4
        await pilot.press("down")
        assert app.position.index == 5 and "Q[I,2] =" in app.query_one(ExplainPanel).plain  # the row finished
        await pilot.press("down")
        assert app.position.index == 8 and "Q[love,2] =" in app.query_one(ExplainPanel).plain  # a whole row
        await pilot.press("up", "up")
        assert app.position.index == 2  # Q blank again: the last of X's rows
        await pilot.press("end", "down")
        assert app.position.index == 65  # nothing past the end
        await settle(pilot)
        assert "✓ Done" in app.query_one(ExplainPanel).plain
        footer = " ".join(str(k.render()) for k in app.screen.query("FooterKey"))
        assert "row" in footer and "quit" in footer  # 80 columns hold the row key and quit


async def test_row_keys_stay_out_of_the_cache_view_and_the_modal_screens() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("k")
        step = app.modes.side_step
        await pilot.press("down")
        assert app.modes.side_step == step and app.position.index == 0
        await pilot.press("k", "question_mark", "down", "down")
        assert app.position.index == 0  # the help scrolls; the trace behind it stays
        await pilot.press("escape")
        assert app.position.index == 0 and "op 1/66" in str(app.query_one(FormulaLine).render())
        await pilot.press("down")
        assert app.position.index == 1  # Embed fills a row per operation


async def test_page_down_scrolls_a_long_explanation() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5", "w")  # Softmax with the what-if table: more lines than the panel holds
        await settle(pilot)
        panel = app.query_one(ExplainPanel)
        assert panel.virtual_size.height > panel.size.height
        await pilot.press("pagedown")
        await settle(pilot)
        assert panel.scroll_y > 0 and app.position.index == 48  # the trace stays where it was
        await pilot.press("pageup")
        await settle(pilot)
        assert panel.scroll_y == 0


async def test_the_quiz_bar_leaves_the_side_views() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        await settle(pilot)
        assert app.query_one("#quizbar").display
        await pilot.press("k")  # the cache view hides nothing to predict
        await settle(pilot)
        assert not app.query_one("#quizbar").display
        await pilot.press("k")
        await settle(pilot)
        assert app.query_one("#quizbar").display and app.modes.quiz is not None


def test_the_maps_legend_fits_its_box_at_80_columns() -> None:
    from qkv_tui.display.heatmap import attention_map
    from qkv_tui.teach.trace import Trace

    trace = Trace(compute(load_scenario("causal_mask")))
    legend = attention_map(trace, 0, len(trace) - 1).legend
    assert "masked" in legend and all(len(line) <= 72 for line in legend.splitlines())


async def test_the_map_shades_the_weights_the_panes_show_by_hand() -> None:
    from qkv_tui.ui.widgets.heatmap import HeatmapScreen

    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end", "minus", "minus", "h", "m")  # 1 decimal, by hand
        await pilot.pause()
        assert isinstance(app.screen, HeatmapScreen)
        assert app.screen.trace.comp.hand_decimals == 1


# --- predict-then-reveal: a fair question ----------------------------------------------------------


def test_a_softmax_question_leaves_the_exponentials_and_the_row_sum_to_the_learner() -> None:
    """It showed `= e^-2.310 / 1.414 = 0.099 / 1.414 = ?`: every exponential and the row sum worked, one division left."""
    from qkv_tui.teach.quiz import Score, questions

    for name in ("i_love_ai", "causal_mask", "sink", "alibi", "sixteen_tokens"):
        comp = compute(load_scenario(name))
        presenter = Presenter(comp)
        trace = presenter.exact
        for run in (r for r in trace.runs if r.stage == "softmax"):
            for index in range(run.start, run.stop):
                op = trace.op(index, 3)
                row = trace.softmax_row(run.head, op.row, 3)
                for asked in questions(trace, index, 3):
                    shown = presenter.frame(Position(index, run.head or 0), Modes(quiz=Score(), question=asked))
                    text = plain([shown.explanation.arithmetic, *shown.explanation.details, *shown.notes])
                    assert text.endswith("= ?") and "Σ" not in text
                    assert f"/ {row.total}" not in text, (name, index, text)  # the row sum
                    # no exponential worked out: e^s appears only as a power still to take
                    assert all(f"= {e}" not in text for e in row.exps if e not in ("0", "1")), (name, index, text)
                    finite = [s for s in row.scaled if s != "−∞"]
                    assert all(f"e^{s}" in text for s in finite[:3])  # what to compute from is there


def test_the_what_if_table_waits_while_a_question_is_pending() -> None:
    """The what-if table holds the row's weights, at ×1 the very answers being asked for."""
    from qkv_tui.teach.quiz import Score, questions

    comp = compute(load_scenario("i_love_ai"))
    presenter = Presenter(comp)
    softmax = next(r for r in presenter.exact.runs if r.stage == "softmax")
    asked = questions(presenter.exact, softmax.start + 1, 3)[0]  # weights[I,love] = 0.707
    modes = Modes(whatif=True, quiz=Score(), question=asked)
    notes = plain(presenter.frame(Position(softmax.start + 1, 0), modes).notes)
    assert "0.707" not in notes and "waits until this question is answered" in notes
    answered = plain(presenter.frame(Position(softmax.start + 1, 0), replace(modes, question=None)).notes)
    assert "0.707" in answered  # once answered, the table is back


def test_the_answer_box_takes_only_what_can_become_an_answer() -> None:
    from qkv_tui.teach.quiz import could_be_choice, could_be_number

    for text in ("", "-", "+", "1", "1.", ".", ".5", "-0.707", "2,5", "1e", "1e-", "1e-3", "−", "-i", "-in", "-inf",
                 "−∞", "-INF"):
        assert could_be_number(text), text
    for text in ("p", "k", "1-", "1.2.", "e", "--", "1 ", "inf", "-infinity", "]", "?", "q", "1e3e"):
        assert not could_be_number(text), text
    keys = ("I", "love", "AI", "<pad>")
    for text in ("l", "LO", "a", "<p", "<pad>", "1", "4"):
        assert could_be_choice(text, keys), text
    for text in ("p", "k", "5", "0", "12", "lovex", "?"):
        assert not could_be_choice(text, keys), text
    assert could_be_choice("1", tuple(f"t{i}" for i in range(12))) and could_be_choice("12", tuple(f"t{i}" for i in range(12)))


def test_state_heads_claim_no_row_sum_their_weights_do_not_have() -> None:
    """The gated delta rule's weights (q·k times the decaying mask) weigh the corrections δ, not V, and are no
    distribution; linear attention's are one only when normalised. The summary says what holds, nothing else."""
    delta = plain(closing_summary(compute(load_scenario("deltanet")), 0, 1, 3))
    assert "sums to 1" not in delta and "weights·V" not in delta
    assert "Sᵀq" in delta and "the 3 masked weights are exactly 0" in delta
    linear = compute(load_scenario("linear"))
    assert "every weight row sums to 1" in plain(closing_summary(linear, 0, 1, 3))
    sc = linear.scenario
    assert sc.linear is not None
    loose = compute(replace(sc, linear=replace(sc.linear, normalize=False)))
    text = plain(closing_summary(loose, 0, 1, 3))
    assert "sums to 1" not in text and "not divided by their row's sum" in text
