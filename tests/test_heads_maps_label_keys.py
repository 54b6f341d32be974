"""The heads view's maps name their keys along the top, each cut to its columns (two, or one on a narrow
screen), over the cells they label; where no line is left for them the map stays whole and the note says
"key labels left out"; a map of binned keys (no one key to a column) has none. Before, the columns had
no labels at all."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.fmt import cell_len
from qkv_tui.core.scenario import builtin_names
from qkv_tui.display.heads_grid import HeadMap, HeadsGrid, key_labels, lay_out
from qkv_tui.display.heads_view import grid
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.ui.widgets.heads import HeadsShown, grid_lines, plain


def test_labels_are_cut_to_their_columns() -> None:
    assert key_labels(("I", "love", "AI"), 2) == "I loAI"
    assert key_labels(("I", "love", "AI"), 1) == "IlA"
    assert key_labels(("猫", "x"), 1) == " x"  # a wide character that does not fit its column is left out
    assert cell_len(key_labels(("猫", "x"), 2)) == 4


def test_the_keys_stand_over_their_columns() -> None:
    comp = compute(load_scenario("two_heads"))
    heads = grid(Presenter(comp), Modes(view="heads"))
    lines = plain(grid_lines(HeadsShown(heads, 0), 80, 12)[0]).splitlines()
    keys, first = lines[1], lines[2]
    assert keys.startswith("     I loAI")
    at = keys.index("I loAI")
    assert first[:at] == "I    " and len(first) >= at + 6  # the cells start under the first key


def test_a_short_screen_keeps_the_map_whole_and_says_so() -> None:
    layout = lay_out(2, 3, 3, ("I", "love", "AI"), 80, 6)  # a title, 3 rows, a reading, a blank: no room left
    assert (layout.rows, layout.cols, layout.keys) == (3, 3, False)
    assert "key labels left out" in layout.note
    roomy = lay_out(2, 3, 3, ("I", "love", "AI"), 80, 7)
    assert roomy.keys and "key labels" not in roomy.note and roomy.lines <= 7


def test_binned_maps_have_no_key_line() -> None:
    layout = lay_out(16, 128, 128, tuple(f"t{i}" for i in range(128)), 120, 30)
    assert layout.cols < 128 and not layout.keys and "key labels" not in layout.note


@pytest.mark.parametrize("name", builtin_names())
@pytest.mark.parametrize("size", [(60, 12), (80, 20), (120, 36), (200, 56)])
def test_every_built_in_fits_with_its_key_line(name: str, size: tuple[int, int]) -> None:
    comp = compute(load_scenario(name))
    heads = grid(Presenter(comp), Modes(view="heads"))
    width, height = size
    lines, layout = grid_lines(HeadsShown(heads, 0), width, height)
    assert layout.lines + 1 <= height or len(layout.visible) == 1  # the legend's line too
    for line in lines[:-1]:  # the last, the note and the legend, is cut by the panel as it always was
        assert cell_len("".join(text for text, _ in line).rstrip()) <= width
    if layout.keys:
        assert key_labels(heads.keys, layout.cell).rstrip() in plain(lines).splitlines()[1]


def test_a_grid_of_one_column_keys() -> None:
    weights, allow = np.full((3, 30), 1 / 30), np.ones((3, 30), dtype=bool)
    keys = tuple(f"k{i}" for i in range(30))
    g = HeadsGrid((HeadMap("h", weights, "", ""),), allow, ("a", "b", "c"), keys)
    lines, layout = grid_lines(HeadsShown(g, 0), 40, 10)
    assert layout.cell == 1 and layout.keys
    assert plain(lines).splitlines()[1].endswith("k" * 30)
