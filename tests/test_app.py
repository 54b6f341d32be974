"""The app driven by Pilot: every key, exact back-and-forth, End = the engine, odd sizes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console
from textual.containers import VerticalScroll

from qkv_tui import compute, load_scenario
from qkv_tui.core.fmt import fmt
from qkv_tui.core.scenario import parse_scenario
from qkv_tui.display.footer_keys import fit_keys
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import FOCUS_FLOOR, QKVApp
from qkv_tui.ui.live import FOOTER_ROOM, FOOTER_ROOMY
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine, KeyFooter, QuizInput, StageBar
from qkv_tui.ui.widgets.screens import GotoScreen, HelpScreen, NotesScreen

from .conftest import SCENARIOS
from .settle import ROUNDS, settle


def text_of(app: QKVApp, widget_type) -> str:
    widget = app.query_one(widget_type)
    return widget.plain if isinstance(widget, ExplainPanel) else str(widget.render())


def visible_panes(app: QKVApp) -> list[MatrixView]:
    return [v for v in app.query(MatrixView) if v.display and v.parent is not None and v.parent.display]


def screen_text(app: QKVApp) -> str:
    panes = [f"{v.border_title}|{v.spec.filled}|{v.spec.current}" for v in visible_panes(app) if v.spec]
    return "\n".join([text_of(app, StageBar), text_of(app, FormulaLine), text_of(app, ExplainPanel), *panes])


async def test_stepping_keys() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.position.index == 0
        assert "1/6 Embed" in text_of(app, FormulaLine) and "op 1/66" in text_of(app, FormulaLine)
        await pilot.press("right", "space")
        assert app.position.index == 2
        await pilot.press("left")
        assert app.position.index == 1
        await pilot.press("right_square_bracket")
        assert app.position.index == 3 and "2/6 Project" in text_of(app, FormulaLine)
        assert "Q[I,0] = X[I]·W_Q[:,0] = 1·1 + 0·0 + 1·1 + 0·0 = 2" in text_of(app, ExplainPanel)
        await pilot.press("right_square_bracket")
        assert "3/6 Score" in text_of(app, FormulaLine)
        await pilot.press("left_square_bracket")
        assert app.position.index == 3
        await pilot.press("end")
        assert app.position.index == 65 and "op 66/66" in text_of(app, FormulaLine)
        await pilot.press("home")
        assert app.position.index == 0
        await pilot.press("5")
        assert "5/6 Softmax" in text_of(app, FormulaLine)
        await pilot.press("9")  # no such stage: nothing happens
        assert "5/6 Softmax" in text_of(app, FormulaLine)


async def test_keys_grey_out_at_the_ends() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.check_action("prev", ()) is None
        assert app.check_action("first", ()) is None
        assert app.check_action("next", ()) is True
        assert app.check_action("head", (1,)) is False  # one head only: never acts, left out of the footer
        await pilot.press("end")
        assert app.check_action("next", ()) is None
        assert app.check_action("next_stage", ()) is None
        assert app.check_action("prev", ()) is True
        await pilot.press("right")  # at the end: stays, no crash
        assert app.position.index == 65


async def test_forward_then_back_restores_every_screen() -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=(120, 40)) as pilot:
        screens = [screen_text(app)]
        for _ in range(40):
            await pilot.press("right")
            screens.append(screen_text(app))
        for expected in reversed(screens[:-1]):
            await pilot.press("left")
            assert screen_text(app) == expected


def engine_matrix(comp, key: str) -> np.ndarray:
    """The engine's own array for a pane key such as ``scores@0`` (independent of the view code)."""
    name, _, head_text = key.partition("@")
    sc = comp.scenario
    if head_text != "None":
        head = comp.heads[int(head_text)]
        own = getattr(head, name, None)  # a variant's array is its part's (Q_rot is Rotated's)
        parts = (getattr(record, name, None) for record in head.parts.values())
        return {"KT": head.K.T, "scaled": head.masked}.get(name, own if own is not None else next(
            (a for a in parts if a is not None), None))
    return {"X": sc.X, "context_X": sc.context_X, "concat": comp.concat, "final": comp.output, "W_O": comp.W_O}[name]


@pytest.mark.parametrize("name", ["i_love_ai", "causal_mask", "two_heads", "cross_attention", "split_heads"])
async def test_end_shows_the_engine_matrices(name: str) -> None:
    comp = compute(load_scenario(name))
    app = QKVApp(name)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end")
        for head in range(len(comp.heads)):
            if head:
                await pilot.press("tab")
            assert app.position.head == head
            for view in visible_panes(app):
                spec = view.spec
                assert spec is not None
                rows, cols = spec.values.shape
                assert all(spec.is_filled(r, c) for r in range(rows) for c in range(cols)), spec.title
                assert np.array_equal(spec.values, engine_matrix(comp, spec.key)), spec.key


async def test_the_drawn_cells_hold_the_numbers() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end")
        out = next(v for v in visible_panes(app) if v.spec and v.spec.key == "output@0")
        lines = [out.render_line(y).text for y in range(4)]
        assert "1.000 1.637 0.070" in lines[1]
        assert "1.000 1.000 0.333" in lines[2]


async def test_tab_switches_heads() -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        assert app.position.head == 0
        await pilot.press("right", "right", "tab")
        assert app.position.head == 1
        assert "head 2 (2/2)" in text_of(app, FormulaLine)
        assert "3/8 Score" in text_of(app, FormulaLine)
        titles = [v.border_subtitle for v in visible_panes(app)]
        assert "head 2" in titles
        await pilot.press("shift+tab")
        assert app.position.head == 0


async def test_cross_attention_labels_the_key_side() -> None:
    app = QKVApp("cross_attention")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        kt = next(v for v in visible_panes(app) if v.spec and v.spec.key.startswith("KT"))
        assert kt.spec is not None and kt.spec.col_labels == ("I", "love", "AI")  # the English encoder's keys


async def test_help_notes_and_quit() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("n")
        assert isinstance(app.screen, NotesScreen)
        await pilot.press("n")
        assert not isinstance(app.screen, NotesScreen)
        await pilot.press("q")
    assert app.return_code == 0


async def test_goto_answers_bad_input_kindly() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        assert isinstance(app.screen, GotoScreen)
        await pilot.press("x", "y", "enter")
        assert isinstance(app.screen, GotoScreen)
        assert "is not an operation number" in str(app.screen.query_one("#goto-error").render())
        await pilot.press("backspace", "backspace", "9", "9", "enter")
        assert isinstance(app.screen, GotoScreen)  # out of range
        await pilot.press("backspace", "backspace", "4", "0", "enter")
        assert not isinstance(app.screen, GotoScreen)
        assert app.position.index == 39


@pytest.mark.parametrize("size", [(1, 1), (10, 3), (20, 5), (30, 8), (49, 30)])
async def test_tiny_terminals_say_so(size: tuple[int, int]) -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=size) as pilot:
        await pilot.press("right", "tab", "end", "left")
        assert app.screen.has_class("-too-small")


async def test_resize_while_stepping() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(120, 40)) as pilot:
        for size in [(80, 24), (30, 8), (60, 16), (200, 60), (1, 1), (80, 24)]:
            await pilot.resize_terminal(*size)
            await pilot.press("right", "right_square_bracket")
            await pilot.pause()
        assert not app.screen.has_class("-too-small")
        assert app.position.index > 0


def one_head(seed: int, n: int, d_model: int, d_k: int, token: str = "t", mask: str = "") -> str:
    """A generated one-head scenario of small integers: n tokens, the same W for Q, K and V."""
    rng = np.random.default_rng(seed)
    X = rng.integers(-2, 3, size=(n, d_model)).tolist()
    W = rng.integers(-1, 2, size=(d_model, d_k)).tolist()
    tokens = [f"{token}{i}" for i in range(n)]
    masked = f"mask = '{mask}'\n" if mask else ""
    return (f"tokens = {tokens}\nX = {X}\n{masked}"
            f"[[heads]]\nW_Q = {W}\nW_K = {W}\nW_V = {W}\n").replace("'", '"')


def big_scenario(n: int) -> str:
    return one_head(7, n, 8, 4, mask="causal")


async def test_big_scenarios_scroll_to_the_current_cell() -> None:
    app = QKVApp(parse_scenario(big_scenario(80), "big.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")  # Score: an 80×80 matrix
        await pilot.press("g")
        score_start = app.position.index
        for ch in str(score_start + 75 * 80 + 70 + 1):
            await pilot.press(ch)
        await pilot.press("enter")
        await pilot.pause()
        scores = next(v for v in visible_panes(app) if v.spec and v.spec.key == "scores@0")
        assert scores.spec is not None and scores.spec.current == (75, 70)
        assert scores.scroll_y > 0 and scores.scroll_x > 0
        visible_row = 75 - int(scores.scroll_y) + 1
        assert 1 <= visible_row < scores.size.height
        assert "t75" in scores.render_line(visible_row).text


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
async def test_focus_panes_fit_80x24_without_scrolling(path) -> None:
    """At 80×24 the panes the current operation reads and writes, and its arithmetic, are all in view."""
    if load_scenario(path).n > 8:
        pytest.skip("more rows than 80×24 holds: its panes scroll to the cells in use")
    app = QKVApp(path)
    async with app.run_test(size=(80, 24)) as pilot:
        # Concat shows every head's output beside the joined rows, and Loss the joined rows (concat) beside W_O:
        # past 6 columns (differential's two heads of 2d = 4) panes of decimals are wider than 80 columns, so they
        # scroll to the cells in use
        wide = app.trace.comp.heads and sum(h.joined.shape[1] for h in app.trace.comp.heads) > 6
        for run in app.trace.runs:
            if wide and run.stage in ("concat", "loss"):
                continue
            for index in (run.start, run.stop - 1):
                app.position = app.stepper.goto(app.position, index)
                await pilot.pause()
                focus = [v for v in app.query_one("#focus").query(MatrixView) if v.display]
                assert focus
                for view in focus:
                    assert (view.max_scroll_x, view.max_scroll_y) == (0, 0), (run.stage, view.border_title)
                    assert view.region.bottom <= app.query_one(ExplainPanel).region.y
                explain = app.query_one(ExplainPanel)
                if explain.region.height < explain.lines_needed(80):
                    # no room for both: the panes keep their floor and the explanation scrolls, nothing is cut
                    assert app.query_one("#focus").region.height <= FOCUS_FLOOR, run.stage
                    assert explain.virtual_size.height == explain.lines_needed(80) - 1
                    assert explain.max_scroll_y > 0


async def screenshot_at(name: str, index: int, head: int) -> str:
    app = QKVApp(name)
    async with app.run_test(size=(120, 40)) as pilot:
        app.position = Position(index, head)
        await settle(pilot)
        return app.export_screenshot()


@pytest.mark.parametrize("name", ["two_heads", "padding_mask"])
async def test_partial_redraws_leave_no_stale_cells(name: str) -> None:
    """Stepping redraws only the rows that change; every screen must equal one drawn from scratch.

    Both screenshots are taken once the app has settled (tests/settle.py): Textual rebuilds the
    footer asynchronously, and on a loaded machine one pause() used to catch a fresh app before it had.
    """
    stepped = QKVApp(name)
    seen = []
    async with stepped.run_test(size=(120, 40)) as pilot:
        for steps in (5, 4, 9, 22, 14, 23):
            for _ in range(steps):
                await pilot.press("right")
            await settle(pilot)
            seen.append((stepped.position, stepped.export_screenshot()))
        await pilot.press("left", "left", "tab", "right")
        await settle(pilot)
        seen.append((stepped.position, stepped.export_screenshot()))
    for pos, expected in seen:
        assert await screenshot_at(name, pos.index, pos.head) == expected, pos


async def test_big_panes_follow_the_cells_being_read() -> None:
    """In a wide W_Q the column being read scrolls into view, though the current cell is in Q."""
    app = QKVApp(parse_scenario(big_scenario_wide(), "wide.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        start = app.position.index
        app.position = app.stepper.goto(app.position, start + 29)  # Q[t0,29]: reads W_Q[:,29]
        # the scroll lands after a refresh: wait for it by condition, never by one pause (tests/settle.py)
        for _ in range(ROUNDS):
            await pilot.pause()
            weights = next(v for v in visible_panes(app) if v.spec and v.spec.key == "W_Q@0")
            if weights.scroll_x > 0:
                break
        assert weights.spec is not None and weights.spec.cols == frozenset({29})
        assert weights.scroll_x > 0
        header = weights.render_line(0).text
        assert "29" in header.split()


def big_scenario_wide() -> str:
    return one_head(3, 20, 6, 32)


async def test_scrolled_panes_never_show_a_cut_number() -> None:
    """Only whole columns are drawn: a pane too narrow for "-11" must not show "-1"."""
    rng = np.random.default_rng(0)

    def mat(rows: int, cols: int) -> list[list[int]]:
        return rng.integers(-2, 3, (rows, cols)).tolist()

    tokens = [f"t{i}" for i in range(16)]
    text = (f"tokens = {tokens}\nX = {mat(16, 8)}\nmask = 'causal'\n[attention]\nnum_heads = 2\n"
            f"W_Q = {mat(8, 8)}\nW_K = {mat(8, 8)}\nW_V = {mat(8, 8)}\n")
    app = QKVApp(parse_scenario(text.replace("'", '"'), "wide.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3", *["right"] * 5)
        await pilot.pause()
        assert any(view.show_vertical_scrollbar for view in visible_panes(app))  # the case that cut digits
        for view in visible_panes(app):
            spec = view.spec
            assert spec is not None
            for y in range(1, view.size.height):
                row = int(view.scroll_y) + y - 1
                if row >= spec.values.shape[0]:
                    break
                strip = view.render_line(y)
                # a vertical scrollbar covers the pane's last column: a line drawn under it loses a digit
                assert strip.cell_length == view.scrollable_content_region.width
                shown = strip.text.split()[1:]  # drop the row label
                cells = [fmt(float(v), spec.integral, spec.decimals) if spec.is_filled(row, c) else ""
                         for c, v in enumerate(spec.values[row])]
                shown_cells = [c for c in cells if c]
                # the numbers on screen are a run of whole, consecutive cells of the row
                runs = [shown_cells[i:i + len(shown)] for i in range(len(shown_cells) - len(shown) + 1)]
                assert not shown or shown in runs, (spec.key, row, shown)


def test_small_panes_keep_their_width_beside_big_ones() -> None:
    from qkv_tui import compute
    from qkv_tui.display.layout import natural_width, share_width
    from qkv_tui.display.view import View
    from qkv_tui.teach.trace import Trace

    comp = compute(parse_scenario(big_scenario(40), "big.toml"))
    view = View(Trace(comp))
    op_index = Trace(comp).runs[2].start + 3  # Score: Q, Kᵀ, scores
    specs, _ = view.panes(Position(op_index, 0))
    widths = share_width(specs, 80)
    assert widths[0] == natural_width(specs[0], titled=False)  # Q (40×4) stays whole
    assert widths[1:] == ["1fr", "1fr"]


def test_k_transposed_gives_up_its_row_labels_only_where_that_makes_the_row_fit() -> None:
    """RoPE scaled with YaRN at Score: Q' 3×4, K'ᵀ 4×3 and the scores, signed at 3 decimals, need 83 columns;
    without K'ᵀ's dimension labels (named across Q''s top in the same order) they need 79."""
    from qkv_tui.display.layout import fitted, natural_width
    from qkv_tui.display.view import View
    from qkv_tui.teach.trace import Trace

    trace = Trace(compute(load_scenario("rope_scaling")))
    start = next(run.start for run in trace.runs if run.stage == "score")
    specs, _ = View(trace).panes(Position(start, 0))
    assert [s.transposed for s in specs] == [False, True, False]
    assert sum(natural_width(s, titled=False) for s in specs) == 83
    assert fitted(specs, 120) == specs  # room enough: every label stays
    narrow = fitted(specs, 80)
    assert narrow[0] is specs[0] and narrow[2] is specs[2] and narrow[1].row_labels == ("",) * 4
    assert sum(natural_width(s, titled=False) for s in narrow) == 79
    assert fitted(specs, 70) == specs  # it would scroll anyway: the labels say which row is which


def test_only_whole_columns_are_drawn() -> None:
    from qkv_tui.display.layout import visible_columns

    offsets = (0, 4, 8, 12, 16)  # four columns of 3 characters, each after a space
    assert visible_columns(offsets, 0, 14) == (0, 3)  # the fourth would end at 16 > 14: left out
    assert visible_columns(offsets, 0, 16) == (0, 4)
    assert visible_columns(offsets, 5, 8) == (2, 4)  # scrolled into column 1: start at column 2
    assert visible_columns(offsets, 0, 2) == (0, 0)  # not even one column fits
    assert visible_columns(offsets, 99, 8) == (3, 4)


async def test_too_small_follows_each_resize_without_a_key() -> None:
    """The app reads the size from the resize event: no key press is needed to catch up."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.resize_terminal(30, 8)
        await pilot.pause()
        assert app.screen.has_class("-too-small")
        assert "have 30×8" in str(app.query_one("#too-small").render())
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not app.screen.has_class("-too-small")
        await pilot.resize_terminal(49, 40)
        await pilot.pause()
        assert app.screen.has_class("-too-small")


def ten_tokens() -> str:
    return one_head(1, 10, 6, 4, token="tok")


def assert_current_cell_in_view(app: QKVApp) -> None:
    """The pane holding the current cell shows it: its row and its whole column are inside the pane."""
    holders = [v for v in visible_panes(app) if v.spec is not None and v.spec.current is not None]
    assert holders, "no pane holds the current cell"
    for view in holders:
        spec = view.spec
        assert spec is not None and spec.current is not None
        row, col = spec.current
        top = int(view.scroll_y)
        assert top <= row < top + view.scrollable_content_region.height - 1, (spec.key, row, top)
        if col is not None:
            x, room = int(view.scroll_x), view.scrollable_content_region.width - spec.label_width
            assert x <= spec.offsets[col] and spec.offsets[col + 1] <= x + room, (spec.key, col, x, room)


@pytest.mark.parametrize("keys", [["g", "2", "5", "0", "enter"], ["end"], ["4", "end", "home", "g", "2", "5", "0",
                                                                           "enter"], ["3", "right_square_bracket"],
                                  ["g", "3", "0", "0", "enter", "left_square_bracket"]],
                         ids=["goto", "end", "home-goto", "stage-keys", "goto-stage-back"])
async def test_every_jump_brings_the_current_cell_into_view(keys: list[str]) -> None:
    """10 tokens at 80×24: after g, end, a stage key... the yellow cell is on screen, as after →."""
    app = QKVApp(parse_scenario(ten_tokens(), "ten.toml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        assert_current_cell_in_view(app)


async def test_keys_do_not_reach_the_trace_behind_help_and_notes() -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("right", "right")
        for opener in ("question_mark", "n"):
            await pilot.press(opener)
            assert isinstance(app.screen, (HelpScreen, NotesScreen))
            await pilot.press("home", "right", "end", "left", "space", "right_square_bracket", "left_square_bracket",
                              "tab", "shift+tab", "3", "g", "k", "p", "w", "h", "plus")
            assert app.position == Position(2, 0)
            assert app.modes == type(app.modes)()
            await pilot.press("escape")
            assert not isinstance(app.screen, (HelpScreen, NotesScreen))
        await pilot.press("right")  # and the trace moves again once they are closed
        assert app.position.index == 3


async def test_goto_box_keeps_its_own_editing_keys() -> None:
    """In the go-to box, home, end and the arrows edit the number; the trace behind stays put."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g", "0", "home", "1", "end", "left", "right")
        assert app.position.index == 0
        assert app.screen.query_one("#goto-input").value == "10"
        await pilot.press("enter")
        assert app.position.index == 9


@pytest.mark.parametrize("typed", ["²", "①", "١٢٣٤", "9" * 5000, "1e3", "-3", " "],
                         ids=["superscript", "circled", "arabic-indic-out-of-range", "5000-digits", "exponent",
                              "negative", "blank"])
async def test_goto_refuses_what_int_cannot_read(typed: str) -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("g")
        app.screen.query_one("#goto-input").value = typed
        await pilot.press("enter")
        assert isinstance(app.screen, GotoScreen)
        assert "is not an operation number" in str(app.screen.query_one("#goto-error").render())
        assert app.position.index == 0
    assert app.return_code in (None, 0)


# --- the chrome around the panes: footer, stage bar, overlays ------------------------------------

TEN_STAGES = """\
title = "Every stage: norm, RoPE, two heads, W_O"
tokens = ["I", "love", "AI"]
X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
[norm]
kind = "rms"
[rope]
layout = "interleaved"
[[heads]]
W_Q = [[1, 0], [0, 1], [1, 0], [0, 1]]
W_K = [[0, 1], [1, 1], [0, 1], [1, 0]]
W_V = [[1, 0], [0, 1], [0, 0], [1, 1]]
[[heads]]
W_Q = [[1, -1], [0, -1], [1, 1], [0, 3]]
W_K = [[1, -1], [0, -1], [1, 1], [0, 3]]
W_V = [[0, 1], [1, 0], [1, 1], [0, 0]]
[output]
W_O = [[1, 0], [0, 1], [1, 1], [0, 1]]
"""


def rendered(body: object, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(body)
    return console.export_text().splitlines()


def footer_keys(app: QKVApp) -> list[tuple[str, int, int]]:
    """The footer keys on the screen on top, as (text, first column, last column + 1), left to right."""
    keys = sorted(app.screen.query("FooterKey"), key=lambda k: k.region.x)
    return [(str(k.render()).strip(), k.region.x, k.region.right) for k in keys]


def assert_footer_whole(app: QKVApp, width: int, needed: tuple[str, ...]) -> None:
    keys = footer_keys(app)
    texts = [text for text, _, _ in keys]
    for want in needed:
        assert want in texts, (width, texts)
    for (text, left, right), following in zip(keys, [*keys[1:], None]):
        assert left >= 0 and right <= width, (width, text, left, right)  # never cut by the screen's edge
        assert following is None or right <= following[1], (width, text)  # nor by the next key


@pytest.mark.parametrize("name", ["i_love_ai", "two_heads"])
async def test_the_footer_keeps_help_and_quit_whole_at_every_width(name: str) -> None:
    """Below about 76 columns the footer used to cut its last keys mid-word: `? help` and `q quit` went first."""
    needed = ("? help", "q quit", "→ next")
    app = QKVApp(name)
    async with app.run_test(size=(130, 24)) as pilot:
        await settle(pilot)
        footer = app.query_one(KeyFooter)
        assert footer.left_out == frozenset()
        keys = [k for k in app.screen.query("FooterKey") if not k.has_class("-command-palette")]
        calls = [k.action for k in keys]
        words = [footer.key_width(k) - 2 for k in keys]  # at 130 columns the keys have their full spacing
        palette = sum(footer.key_width(k) + 2 for k in app.screen.query("FooterKey") if k.has_class("-command-palette"))
        needed_calls = {k.action for k in keys if str(k.render()).strip() in needed}
        assert len(needed_calls) == len(needed) and palette > 0
        # the rule at every width, as a pure function (display/footer_keys.fit_keys; ui/live.fit_footer narrows the
        # spacing below FOOTER_ROOMY and drops the palette key below FOOTER_ROOM): the needed keys stay and the keys
        # kept fit the room. A key can be cut only where the room is tightest for the keys kept, at the narrowest
        # width that keeps them, so the app itself is driven to each of those widths and its keys' regions read
        narrowest: dict[tuple[bool, ...], int] = {}
        for width in [*range(50, 96), 99, 100, 101, 120, 130]:
            widths = [w + (1 if width < FOOTER_ROOMY else 2) for w in words]
            room = width - (palette if width >= FOOTER_ROOM else 0)
            fits = fit_keys(calls, widths, footer.keep, room)
            assert needed_calls <= {call for call, fit in zip(calls, fits) if fit}, width
            assert sum(w for w, fit in zip(widths, fits) if fit) <= room, width
            spacing = (width < FOOTER_ROOMY, width >= FOOTER_ROOM, tuple(fits))
            narrowest[spacing] = min(width, narrowest.get(spacing, width))
        assert any(not all(fits) for _, _, fits in narrowest)  # the sweep does reach widths where keys are left out
        for (_, _, fits), width in sorted(narrowest.items(), key=lambda item: item[1]):
            await pilot.resize_terminal(width, 24)
            await settle(pilot)
            assert footer.left_out == {call for call, fit in zip(calls, fits) if not fit}, width
            assert_footer_whole(app, width, needed)

        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert app.query_one(KeyFooter).left_out == frozenset()  # at 80 columns nothing is left out
        assert len(footer_keys(app)) == (9 if name == "i_love_ai" else 10)  # one head: no tab


async def test_the_footer_under_a_pending_question_says_how_to_reveal_and_leave() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "p", "right")
        assert app.modes.question is not None
        for width in (50, 64, 80, 120):
            await pilot.resize_terminal(width, 24)
            await settle(pilot)
            assert_footer_whole(app, width, ("esc reveal", "p leave", "? help", "q quit"))


async def test_the_title_outranks_the_stage_names_at_80_columns() -> None:
    """At 80 columns "I love AI, causal" was cut to "I love AI…", which reads as the seed scenario."""
    for name, title in (("causal_mask", "I love AI, causal"), ("padding_mask", "I love AI, padded"),
                        ("two_heads", "I love AI, two heads"), ("custom_mask", "I love AI, neighbours only (a custom mask)")):
        app = QKVApp(name)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("3")
            bar = text_of(app, StageBar)
            assert f" {title} " in bar, bar
            assert "3 Score" in bar  # the stage being computed keeps its name
    app = QKVApp("i_love_ai")  # where both fit, every stage keeps its name
    async with app.run_test(size=(80, 24)) as pilot:
        assert "1 Embed › 2 Project › 3 Score › 4 Scale › 5 Softmax ›" in text_of(app, StageBar).replace("  ", " ")


async def test_every_stage_has_a_key_and_the_bar_shows_it() -> None:
    """Stage 10 had no key (the bindings stopped at 9) while the help said 1 … 8."""
    app = QKVApp(parse_scenario(TEN_STAGES, "ten_stages.toml"))
    async with app.run_test(size=(200, 40)) as pilot:
        assert len(app.trace.stage_keys) == 10
        bar = text_of(app, StageBar)
        assert "9 Concat" in bar and "0 W_O" in bar and "10 W_O" not in bar
        for key, number in [*((str(n), n) for n in range(1, 10)), ("0", 10)]:
            await pilot.press(key)
            assert f"{number}/10 " in text_of(app, FormulaLine), key
            # the key the bar shows next to the current stage is the key just pressed
            assert f" {key} {app.trace.op(app.position.index).stage.name} " in text_of(app, StageBar)
        palette = {command.title: command.help for command in app.live.commands(app.screen)}
        assert palette["Stage 10: W_O"].startswith("0: ") and palette["Stage 9: Concat"].startswith("9: ")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = "\n".join(rendered(app.screen.body(), 200))
        assert "1 … 9, 0" in help_text and "here all ten" in help_text and "\n  0 W_O" in help_text


def test_the_help_names_the_stage_keys_a_scenario_has() -> None:
    from qkv_tui.ui.widgets.screens import stage_keys_row

    assert stage_keys_row(6)[1].endswith("here 1 … 6")
    assert stage_keys_row(10)[1].endswith("here all ten")
    assert "stages 11 … 12 have no key" in stage_keys_row(12)[1]


@pytest.mark.parametrize(("opener", "screen", "says"), [
    ("question_mark", "HelpScreen", "esc/q close"), ("n", "NotesScreen", "esc/q close"),
    ("g", "GotoScreen", "esc cancel"), ("m", "HeatmapScreen", "esc close"), ("e", "EditScreen", "esc cancel"),
], ids=["help", "notes", "goto", "map", "edit"])
async def test_an_overlay_footer_says_how_to_close_it_and_never_q_quit(opener: str, screen: str, says: str) -> None:
    """Overlays showed the trace's `q quit` while q closed them (or typed into their box)."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(opener)
        await settle(pilot)
        assert type(app.screen).__name__ == screen
        texts = [text for text, _, _ in footer_keys(app)]
        assert says in texts and not any("quit" in text for text in texts), texts
        await pilot.press("escape")
        await settle(pilot)
        assert "q quit" in [text for text, _, _ in footer_keys(app)]  # the trace's own footer is back


async def test_the_help_says_how_to_close_it_on_its_first_line() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert rendered(app.screen.body(), 76)[0].startswith("esc, q or ? closes this help")
        assert app.screen.query_one(VerticalScroll).border_subtitle == "esc, q or ? closes · ↑ ↓ scroll"
        await pilot.press("q")
        assert not isinstance(app.screen, HelpScreen) and app.return_code is None  # q closed it, not the app


# --- the quiz: which keys act while a question waits ------------------------------------------------


async def test_p_leaves_the_quiz_while_a_question_waits() -> None:
    """p used to be typed into the answer box: the quiz could not be left with its own key."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "p", "right", "1")
        assert app.modes.question is not None and app.query_one("#quiz-input").value == "1"
        await pilot.press("p")
        assert app.modes.quiz is None and app.modes.question is None
        assert app.query_one("#quiz-input").value == "" and app.position.index == 4  # nothing else moved


async def test_keys_that_cannot_be_part_of_an_answer_act_while_a_question_waits() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "p", "right")
        assert "digits answer: ] [ change stage" in str(app.query_one("#quiz-message").render())
        await pilot.press("right_square_bracket")  # ] was typed into the box
        assert app.position.index == 30 and "3/6 Score" in text_of(app, FormulaLine)
        assert app.modes.quiz is not None and app.modes.question is None  # left unanswered: revealed, not scored
        await pilot.press("right", "space")  # space steps on, as everywhere
        assert app.position.index == 32 and app.modes.question is not None
        await pilot.press("minus", "5", "full_stop", "7", "question_mark")  # a sign, digits, a point: typed; ? helps
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert app.query_one("#quiz-input").value == "-5.7"
        await pilot.press("minus")  # no number goes on with "-": it is the fewer-decimals key, and asks again
        assert app.modes.decimals == 2 and app.modes.question is not None and app.modes.question.decimals == 2
        assert app.query_one("#quiz-input").value == ""
        await pilot.press("k")  # the cache view: nothing to predict there
        assert app.modes.view == "cache" and app.modes.question is None


async def test_minus_infinity_can_still_be_typed_for_a_masked_cell() -> None:
    app = QKVApp("causal_mask")
    async with app.run_test(size=(80, 24)) as pilot:
        scale = next(r for r in app.trace.runs if r.stage == "scale")
        app.position = Position(scale.start, 0)  # scaled[I,I]; the next, scaled[I,love], is masked
        await pilot.press("p", "right")
        assert app.modes.question is not None and app.modes.question.value == float("-inf")
        await pilot.press("minus", "i", "n", "f", "enter")
        assert app.modes.message.startswith("Right") and str(app.modes.quiz) == "1/1 right"


async def test_which_key_wins_takes_a_number_or_a_name() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5", "left", "p", "right")
        question = app.modes.question
        assert question is not None and question.kind == "argmax"
        assert question.prompt.endswith("1 I · 2 love · 3 AI")
        await pilot.press("2", "enter")  # love, by its number
        assert app.modes.message.startswith("Right: love") and str(app.modes.quiz) == "1/1 right"


async def test_a_pending_question_follows_hand_rounding_and_decimals() -> None:
    """h changed the numbers on screen but the question kept the exact answer; + revealed it unasked."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        mix = next(r for r in app.trace.runs if r.stage == "mix")
        app.position = Position(mix.start + 2, 0)
        await pilot.press("p", "right")  # out[love,0]: 1.000 exactly, 0.999 by hand
        assert app.modes.question is not None and app.modes.question.check("1.000").right
        await pilot.press("h")
        assert app.modes.question is not None and app.modes.question.check("0.999").right
        assert not app.modes.question.check("1.000").right
        await pilot.press("equals_sign")  # one more decimal: asked again, at four
        assert app.modes.decimals == 4 and app.modes.question is not None and app.modes.question.decimals == 4
        assert "= ?" in text_of(app, ExplainPanel)


async def test_the_answer_box_gives_the_keys_back_when_its_question_goes_while_too_small() -> None:
    """Found by the storms: closing the help while the terminal was too small gave the focus back to
    the hidden answer box; the question then left (←) did not take it away, so a stage key was typed
    into the box, and the side view's footer later offered `esc reveal p leave`."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2", "p", "right", "question_mark")
        await pilot.resize_terminal(40, 10)
        await settle(pilot)
        await pilot.press("escape")  # the help closes: Textual gives the focus back to the box
        await settle(pilot)
        await pilot.press("left")  # the question is left unanswered, too small to see
        assert app.modes.question is None and app.focused is None
        await pilot.press("3")  # a stage key again, not a digit for a question no longer asked
        assert app.position.index == 30 and app.query_one("#quiz-input", QuizInput).value == ""
        await pilot.press("right", "t")  # asked again, then the tiles view
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert app.modes.view == "tiles" and app.focused is None
        texts = [text for text, _, _ in footer_keys(app)]
        assert "esc reveal" not in texts and "p leave" not in texts and "q quit" in texts
        await pilot.press("t", "right")  # back in the trace, still predicting: the box asks again
        assert app.modes.question is not None and isinstance(app.focused, QuizInput)
