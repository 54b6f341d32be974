"""The attention map (key m) and real heads in the app."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from qkv_tui import compute, load_scenario
from qkv_tui.app import QKVApp
from qkv_tui.display.heatmap import SHADES, attention_map, shade
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.widgets.heatmap import HeatmapScreen


def test_shades_follow_the_weight() -> None:
    assert [shade(w)[0] for w in (0.0, 0.019, 0.02, 0.099, 0.1, 0.29, 0.3, 0.59, 0.6, 1.0)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert shade(1.0)[1] == SHADES[-1][1] == "██"


def test_the_map_shows_the_computed_weights_and_marks_each_rows_largest() -> None:
    trace = Trace(compute(load_scenario("causal_mask")))
    weights = trace.comp.heads[0].weights
    full = attention_map(trace, 0, len(trace) - 1)
    assert full.note == "every row computed"
    assert [label.strip() for label in full.row_labels] == ["0 I", "1 love", "2 AI"]
    assert full.header[0] == "I l A " and full.header[1] == "  o I "  # key labels written downwards
    for i, row in enumerate(full.rows):
        for j, cell in enumerate(row):
            if j > i:
                assert cell.level == -1  # masked by the causal mask
            else:
                assert cell.level == shade(float(weights[i, j]))[0]
        assert [c.strongest for c in row].index(True) == int(weights[i].argmax())


def test_rows_not_yet_computed_stay_blank() -> None:
    trace = Trace(compute(load_scenario("i_love_ai")))
    softmax = next(s for s in trace.segments if s.stage == "softmax")
    amap = attention_map(trace, 0, softmax.start)  # the first weight only
    assert amap.note.startswith("0 of 3 rows computed") or amap.note.startswith("1 of 3 rows computed")
    assert amap.rows[2][2].level == -2 and amap.rows[2][2].text == "  "
    before = attention_map(trace, 0, 0)
    assert all(cell.level == -2 for row in before.rows for cell in row)


async def test_m_opens_the_map_and_tab_walks_the_heads() -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("end", "m")
        await pilot.pause()
        assert isinstance(app.screen, HeatmapScreen)
        body = str(app.screen.query_one("#heatmap", Static).render())
        assert "head 1" in body and "every row computed" in body and "0 I" in body
        await pilot.press("tab")
        await pilot.pause()
        assert "head 2" in str(app.screen.query_one("#heatmap", Static).render())
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HeatmapScreen) and app.position.head == 0


async def test_a_predicted_cell_stays_hidden_in_the_map() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        softmax = next(s for s in app.trace.segments if s.stage == "softmax")
        app.position = Position(softmax.start - 1, 0)
        await pilot.press("p", "right")  # the first weight is now a question, typed into the answer box
        await pilot.pause()
        assert app.modes.question is not None and app.position.index == softmax.start
        app.action_heatmap()  # as the command palette would; the "m" key itself goes to the answer box
        await pilot.pause()
        assert isinstance(app.screen, HeatmapScreen) and app.screen.index == softmax.start - 1
        amap = attention_map(app.trace, 0, app.screen.index)
        assert all(cell.level == -2 for row in amap.rows for cell in row)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_the_map_fits_small_screens_by_scrolling(size: tuple[int, int]) -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=size) as pilot:
        await pilot.press("end", "m")
        await pilot.pause()
        assert app.screen.query_one("#heatmap", Static).region.width > 0


# --- a real head in the app ---------------------------------------------------------------------

MODEL = "glassllm_previous_word"


def at_weight(app: QKVApp, row: int, col: int) -> Position:
    """The operation that computes weights[row, col] of the first head."""
    seg = next(s for s in app.trace.segments if s.stage == "softmax" and s.head == 0)
    for index in range(seg.start, seg.start + seg.count):
        op = app.trace.op(index)
        if op.row == row and (op.col == col or op.col is None):
            return Position(index, 0)
    raise AssertionError("no such weight")


async def test_a_real_head_steps_and_maps_without_errors() -> None:
    app = QKVApp(MODEL)
    async with app.run_test(size=(80, 24)) as pilot:
        app.position = at_weight(app, 8, 6)  # "at" (of "mat") reading "▁the"
        await pilot.pause()
        for _ in range(3):
            await pilot.press("right")
        await pilot.press("end", "m")
        await pilot.pause()
        body = str(app.screen.query_one("#heatmap", Static).render())
        assert "L1 H0" in body and "20×20" in body and "every row computed" in body
        amap = attention_map(app.trace, 0, app.position.index)
        assert amap.rows[8][6].strongest and amap.rows[7][6].strongest  # both pieces of "mat" look at "the"


class TestRealHead:
    @pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
    def test_softmax_of_a_real_head(self, snap_compare, size: tuple[int, int]) -> None:

        async def there(pilot) -> None:  # type: ignore[no-untyped-def]
            pilot.app.position = at_weight(pilot.app, 8, 6)
            await pilot.pause()

        assert snap_compare(QKVApp(MODEL), run_before=there, terminal_size=size)

    @pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
    def test_map_of_a_real_head(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp(MODEL), press=["end", "m"], terminal_size=size)


@pytest.mark.parametrize("size", [(20, 5), (10, 3), (1, 1), (50, 14)])
async def test_a_real_head_never_crashes_at_small_sizes(size: tuple[int, int]) -> None:
    app = QKVApp(MODEL)
    async with app.run_test(size=size) as pilot:
        for key in ("right_square_bracket",) * 7 + ("m", "tab", "escape", "end", "left"):
            await pilot.press(key)
        await pilot.pause()
        assert app.is_running


async def test_every_stage_of_a_real_head_is_reachable() -> None:
    app = QKVApp(MODEL)
    async with app.run_test(size=(120, 40)) as pilot:
        stages = []
        for _ in range(len(app.trace.stage_keys)):
            stages.append(app.trace.segment_at(app.position.index).stage)
            await pilot.press("right_square_bracket")
            await pilot.pause()
        assert stages == app.trace.stage_keys and app.position.index > 0


async def test_a_hugging_face_folder_opens_in_the_app(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from .model_fixtures import build_gpt2

    build_gpt2(tmp_path / "gpt2", dtype="BF16")
    path = tmp_path / "head.toml"
    path.write_text('[model]\nsource = "gpt2"\ntext = "Alice was reading"\nlayer = 1\nheads = [2]\n', encoding="utf-8")
    app = QKVApp(path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.scenario.tokens[1] == "Ġwas" and app.comp.scenario.norm is not None and app.comp.scenario.norm.beta is not None
        await pilot.press("end", "m")
        await pilot.pause()
        assert "L1 H2" in str(app.screen.query_one("#heatmap", Static).render())
