"""Focus panes that do not fit across give up row labels, least informative first (display/layout.fitted):
mla_learns' Loss stage (concat, target and dO, 3×4 each at 3 decimals) at 80 columns, and its snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.display.layout import fitted, natural_width
from qkv_tui.display.view import PaneSpec, View
from qkv_tui.teach.place import find_place
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp

SIZES = pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
LOSS_OP = 6  # dO[love,1] = concat[love,1] − target[love,1]: mid-row, its operands marked in both panes


def loss_panes() -> list[PaneSpec]:
    trace = Trace(compute(load_scenario("mla_learns")))
    start = next(run.start for run in trace.runs if run.stage == "loss")
    specs, _ = View(trace).panes(Position(start, 0))
    return specs


def width(specs: list[PaneSpec], height: int | None = None) -> int:
    return sum(natural_width(s, titled=False, height=height) for s in specs)


def test_loss_panes_fit_80_columns_by_their_row_labels_alone() -> None:
    specs = loss_panes()
    assert [s.key for s in specs] == ["concat@None", "target@None", "dO@None"]
    assert width(specs) == 93
    assert fitted(specs, 120) == specs  # room enough: every label stays
    narrow = fitted(specs, 80, height=6)
    # target and dO stand on concat's lines: its labels name their rows too; concat's are cut to one letter
    assert [s.row_labels for s in narrow] == [("I", "l", "A"), ("", "", ""), ("", "", "")]
    assert width(narrow, 6) == 80
    for old, new in zip(specs, narrow):
        assert new.values is old.values and new.col_labels == old.col_labels and new.decimals == old.decimals


def test_labels_are_cut_only_as_far_as_needed() -> None:
    specs = loss_panes()
    assert [s.row_labels for s in fitted(specs, 83, height=6)] == [("I", "love", "AI"), ("",) * 3, ("",) * 3]
    assert [s.row_labels for s in fitted(specs, 82, height=6)] == [("I", "lov", "AI"), ("",) * 3, ("",) * 3]
    assert fitted(specs, 79, height=6) == specs  # it scrolls anyway: every label says which row is which


def test_panes_cut_in_height_keep_their_labels() -> None:
    """Each pane scrolls its own rows, so a row beside another pane's label need not be that label's row."""
    specs = loss_panes()
    assert fitted(specs, 83, height=5) == specs  # 84 with the scrollbars: it scrolls anyway


def test_cut_labels_stay_distinct() -> None:
    specs = loss_panes()
    twins = [replace(s, row_labels=("ab", "ac", "b")) for s in specs]
    # a one-letter cut would make "ab" and "ac" one row: two letters is the least, and it does not fit 80
    assert fitted(twins, 80, height=6) == twins
    assert [s.row_labels for s in fitted(twins, 79 + 2, height=6)] == [("ab", "ac", "b"), ("",) * 3, ("",) * 3]


def opened() -> QKVApp:
    sc = load_scenario("mla_learns")
    return QKVApp(sc, place=find_place(Trace(compute(sc)), "loss", LOSS_OP))


class TestFit80Snapshots:
    @SIZES
    def test_loss(self, snap_compare, size: tuple[int, int]) -> None:
        assert snap_compare(opened(), terminal_size=size)
