"""The heads view (v): every head's map side by side, laid out for the room (display/heads_grid.py); the arrows
pick, enter opens the head in the trace, escape or v leave; a model's [ ] walk its layers, each layer's input
computed once (importers/layer_walk.py)."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.model_layers import model_layers
from qkv_tui.display.heads_grid import HeadMap, lay_out, readings
from qkv_tui.display.heads_view import grid
from qkv_tui.display.modes import TRACE, Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.heads import HeadsPanel, grid_lines, plain
from qkv_tui.ui.widgets.screens import KEYS

from .conftest import ROOT


def shown(name: str, size: tuple[int, int], picked: int = 0) -> str:
    presenter = Presenter(compute(load_scenario(name)))
    frame = presenter.frame(Position(0, 0), Modes(view="heads", side_step=picked))
    assert frame.heads is not None and frame.focus == []
    return plain(grid_lines(frame.heads, *size)[0])


def test_small_maps_show_every_weight_with_the_query_labels() -> None:
    text = shown("two_heads", (80, 12))
    lines = text.splitlines()
    assert lines[0].startswith("▶ head 1") and "head 2" in lines[0]
    assert lines[1].startswith("     I loAI")  # the keys along the top (tests/test_heads_maps_label_keys.py)
    assert lines[2].startswith("I    ") and lines[3].startswith("love ") and lines[4].startswith("AI   ")
    assert "I→love love→I AI→love" in lines[5] or "→" in lines[5]  # each query's strongest key
    assert "drawn in" not in text  # nothing binned


def test_masked_cells_are_dots_and_the_row_max_is_the_strongest() -> None:
    comp = compute(load_scenario("causal_mask"))
    heads = grid(Presenter(comp), Modes(view="heads"))
    cells = heads.cells(0, comp.scenario.n, comp.scenario.m)
    allow = comp.scenario.allow
    assert all((level == -1) == (not allow[i, j]) for i, row in enumerate(cells.levels) for j, level in enumerate(row))
    assert cells.strongest == tuple(int(np.where(allow[i], comp.heads[0].weights[i], -1).argmax())
                                    for i in range(comp.scenario.n))
    assert "·" in shown("causal_mask", (80, 12))


def test_a_bin_shows_its_largest_weight() -> None:
    weights = np.zeros((8, 8))
    weights[5, 6] = 0.9  # one peak in the bin of rows 4-7, columns 4-7
    allow = np.ones((8, 8), dtype=bool)
    from qkv_tui.display.heads_grid import HeadMap, HeadsGrid

    g = HeadsGrid((HeadMap("h", weights, *readings(weights, allow, tuple("abcdefgh"), tuple("abcdefgh"))),),
                  allow, tuple("abcdefgh"), tuple("abcdefgh"))
    assert g.cells(0, 2, 2).levels == ((0, 0), (0, 4))


@pytest.mark.parametrize("size", [(80, 12), (120, 30), (200, 50)])
def test_sixteen_heads_of_128_tokens_fit_and_say_what_they_leave_out(size: tuple[int, int]) -> None:
    layout = lay_out(16, 128, 128, tuple(f"t{i}" for i in range(128)), *size)
    assert len(layout.visible) * layout.per_row >= 16  # every head in view
    assert layout.per_row * layout.slot + 2 * (layout.per_row - 1) <= size[0]
    assert layout.lines <= size[1]  # the panel's last line (the legend) is not given to lay_out
    assert layout.rows >= 3 and layout.cols >= 3
    assert "128×128 drawn in" in layout.note


def test_many_heads_scroll_to_keep_the_picked_one_in_view() -> None:
    from qkv_tui.display.heads_grid import HeadMap, HeadsGrid

    weights, allow = np.full((4, 4), 0.25), np.ones((4, 4), dtype=bool)
    g = HeadsGrid(tuple(HeadMap(f"h{i}", weights, "", "") for i in range(64)), allow, tuple("abcd"), tuple("abcd"))
    first, last = g.layout(60, 10, 0), g.layout(60, 10, 63)
    assert first.visible.start == 0 and 63 // last.per_row in last.visible
    assert "rows of maps in view; ↑ ↓ scroll" in first.note


def test_the_reading_names_the_pattern_when_the_pairs_do_not_fit() -> None:
    n = 12
    weights = np.eye(n, k=-1)
    weights[0, 0] = 1.0
    allow = np.tril(np.ones((n, n), dtype=bool))
    labels = tuple(f"tok{i}" for i in range(n))
    pairs, pattern = readings(weights, allow, labels, labels)
    assert pairs.startswith("tok0→tok0 tok1→tok0 tok2→tok1")
    assert pattern == "→ previous token 11/12"
    narrow = HeadMap("head 1", weights, pairs, pattern)
    assert [narrow.reading(w) for w in (30, 11, 6, 3)] == ["→ previous token 11/12", "→prev 11/12", "→prev", "→p…"]


def test_the_help_lists_the_heads_views_keys() -> None:
    rows = dict(KEYS)
    assert rows["v"].startswith("heads: every head's attention map side by side")
    assert "enter" in " ".join(rows) and "[ ]" in rows


async def test_v_arrows_enter_and_escape() -> None:
    app = QKVApp("gqa")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("v")
        heads = len(app.comp.heads)
        assert app.modes.view == "heads" and app.modes.side_step == 0 and heads > 2
        panel = app.query_one(HeadsPanel)
        assert panel.text.startswith("▶ ")
        await pilot.press("right")
        assert app.modes.side_step == 1
        await pilot.press("left", "left")  # the first head is the first: ← rests there
        assert app.modes.side_step == 0
        across = panel.across
        await pilot.press("down")
        assert app.modes.side_step == (across if across < heads else 0)
        await pilot.press("end")
        assert app.modes.side_step == heads - 1
        assert app.live.screenshot_name() == f"gqa-heads-head{heads}.svg"
        await pilot.press("enter")  # that head's trace, at its first stage of its own
        assert app.modes.view == TRACE and app.position.head == heads - 1
        run = app.stepper.run_of(app.position.index)
        assert run.head == heads - 1 and run.start == app.position.index
        assert run == next(r for r in app.trace.runs if r.head == heads - 1)
        await pilot.press("v")
        assert app.modes.view == "heads"
        await pilot.press("escape")  # back to the trace, where it was
        assert app.modes.view == TRACE and app.position.head == heads - 1
        await pilot.press("v", "v")
        assert app.modes.view == TRACE


async def test_one_head_is_one_map_and_the_trace_keys_rest() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("v")
        assert app.modes.view == "heads"
        assert app.check_action("next", ()) is None and app.check_action("next_stage", ()) is False
        assert app.check_action("row", (1,)) is False  # one map: ↓ never acts here, not in the footer
        await pilot.press("enter")
        assert app.modes.view == TRACE and app.stepper.run_of(app.position.index).stage == "project"


def test_a_models_layers_are_walked_computing_each_input_once() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "glassllm_previous_word.toml")
    walk = model_layers(scenario)
    assert walk is not None and walk.layers == 4 and walk.first == 1
    start = walk.walk.blocks_run
    for layer in (1, 2, 3, 2, 1, 0, 3):
        walk.computation(layer)
    assert walk.walk.blocks_run - start <= 3  # layers 1, 2, 3 entered once each, from the one below
    # the walked layer is the layer the file would give: the same X as a fresh expansion
    fresh = load_scenario(ROOT / "scenarios" / "glassllm_previous_word.toml")
    assert np.array_equal(walk.scenario(1).X, fresh.X)
    assert len(walk.scenario(1).heads) == 4 and len(fresh.heads) == 1  # every head of the layer


async def test_a_model_scenario_shows_every_head_and_walks_its_layers() -> None:
    app = QKVApp(ROOT / "scenarios" / "glassllm_previous_word.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("v")
        assert len(app.comp.heads) == 1  # the file chose head 0
        panel = app.query_one(HeadsPanel)
        assert all(f"L1 H{h}" in panel.text for h in range(4))
        await pilot.press("right_square_bracket")
        assert app.modes.heads_layer == 2 and "L2 H3" in panel.text
        await pilot.press("right_square_bracket", "right_square_bracket")  # layer 3 is the last
        assert app.modes.heads_layer == 3
        await pilot.press("left_square_bracket", "right", "right")
        assert app.modes.heads_layer == 2 and app.modes.side_step == 2
        assert app.live.screenshot_name() == "glassllm_previous_word-heads-layer2-head3.svg"
        await pilot.press("enter")  # layer 2's every head, at head 3's first stage
        assert app.modes.view == TRACE and len(app.comp.heads) == 4
        assert app.comp.scenario.input.chosen_layer == 2 and app.position.head == 2
        await pilot.press("v")
        assert "L2 H0" in app.query_one(HeadsPanel).text  # it opens at the layer in view


HEADS_SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=["80x24", "120x40", "200x60"])


class TestHeadsSnapshots:
    @HEADS_SIZES
    def test_gqa(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("gqa"), press=["v", "right"], terminal_size=size)

    @HEADS_SIZES
    def test_model_layer(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(QKVApp("glassllm_previous_word"), press=["v"], terminal_size=size)
