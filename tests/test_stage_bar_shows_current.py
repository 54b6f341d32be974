"""The stage bar always names the current stage and the title, and is never wider than the screen
(display/stage_bar.py): every built-in's every stage, and its side views' steps, at widths 60 … 200.
Before, mla_learns at --stage dcompress ended at dScore at 80 columns: stages past the tenth have no
key to shrink to, and the bar was cut at the screen's edge."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.fmt import cell_len
from qkv_tui.core.scenario import builtin_names
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.side_views import SIDE_VIEWS, shown_for
from qkv_tui.display.stage_bar import ELIDED, fit_bar
from qkv_tui.display.text import pictured
from qkv_tui.teach.place import find_place
from qkv_tui.teach.stepper import Position
from qkv_tui.teach.trace import Trace
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import StageBar

WIDTHS = range(60, 201)


@cache
def stage_lists(name: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """Every distinct stage list the scenario's screens put on the bar: each stage of the trace (each
    head), and the side views' first, middle and last steps."""
    comp = compute(load_scenario(name))
    presenter = Presenter(comp)
    seen: dict[tuple[tuple[str, str], ...], None] = {}
    for run in presenter.exact.runs:
        seen[presenter.frame(Position(run.start, run.head or 0), Modes()).explanation.stages] = None
    for view in SIDE_VIEWS:
        if not shown_for(view, comp.scenario):
            continue
        modes = Modes(view=view.name)
        steps = view.steps(presenter, modes, 0)
        for step in sorted({0, steps // 2, steps - 1}):
            seen[view.frame(presenter, replace(modes, side_step=step), step, 0).explanation.stages] = None
    return tuple(seen)


def short_enough(title: str, shown: str) -> bool:
    """``shown`` is the title, or its start ended by "…"."""
    return shown == title or (shown.endswith("…") and title.startswith(shown[:-1].rstrip()))


@pytest.mark.parametrize("name", builtin_names())
def test_every_width_shows_the_current_stage_and_the_title(name: str) -> None:
    title = pictured(load_scenario(name).title)
    for stages in stage_lists(name):
        current = [label for label, state in stages if state == "current"]
        for width in WIDTHS:
            bar = fit_bar(title, stages, width)
            where = f"{name} at {width}: {bar.plain!r}"
            assert bar.width <= width, where
            assert bar.title and short_enough(title, bar.title), where
            assert [text for text, state in bar.pieces if state == "current"] == current, where
            # what is shown stands in the stages' order, each run left off as one "…"
            named = [text for text, _ in bar.pieces if text != ELIDED]
            labels = [label for label, _ in stages]
            at = 0
            for text in named:
                at = next(i for i in range(at, len(labels)) if labels[i] == text or labels[i].split()[0] == text) + 1


@pytest.mark.parametrize("name", builtin_names())
def test_a_wide_screen_keeps_every_stage(name: str) -> None:
    title = pictured(load_scenario(name).title)
    for stages in stage_lists(name):
        bar = fit_bar(title, stages, 200)
        if sum(cell_len(label) + 3 for label, _ in stages) + cell_len(title) + 4 <= 200:
            assert bar.title == title and len(bar.pieces) == len(stages), bar.plain


def test_the_window_keeps_a_readable_title_and_the_neighbours() -> None:
    stages = tuple((f"s{i}", "done" if i < 15 else "current" if i == 15 else "todo") for i in range(24))
    bar = fit_bar("A scenario with twenty-four stages", stages, 80)
    assert bar.title.startswith("A scenario")  # at least TITLE_FLOOR cells, cut back to a word
    assert bar.pieces[0] == (ELIDED, "done") and bar.pieces[-1] == (ELIDED, "todo")
    texts = [text for text, _ in bar.pieces]
    assert texts[texts.index("s15") - 1] == "s14" and texts[texts.index("s15") + 1] == "s16"
    assert bar.width <= 80


def test_a_long_current_stage_gives_way_last() -> None:
    stages = (("1 Embed", "done"), ("a stage name far longer than the bar has room for, ever", "current"),
              ("3 Mix", "todo"))
    bar = fit_bar("Title", stages, 50)
    assert bar.width <= 50 and bar.title and [s for _, s in bar.pieces].count("current") == 1


@pytest.mark.parametrize(("name", "stage", "size", "shown"), [
    ("mla_learns", "dcompress", (80, 24), "dCompress"),
    ("learn_to_look", "dembed", (80, 24), "dEmbed"),
    ("mla_learns", "dembed", (60, 24), "dEmbed"),
])
async def test_the_app_bar_names_the_stage_it_is_at(name: str, stage: str, size: tuple[int, int], shown: str) -> None:
    sc = load_scenario(name)
    comp = compute(sc)
    app = QKVApp(sc, comp, place=find_place(Trace(comp), stage))
    async with app.run_test(size=size):
        line = str(app.query_one(StageBar).render())
        assert f" {shown} " in line and line.startswith(f" {sc.title[:6]}")
        assert cell_len(line) <= size[0]
