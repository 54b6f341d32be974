"""The formula line leaves no separator or blank run where a part has nothing to say
(display/status_line.py): the Train view read "Train ·    [3 dp]" (an empty counter), deltanet's
tiles page "    no tiles ·    [3 dp]" (no formula, no counter). Every built-in, every view, every fit."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from qkv_tui import compute, load_scenario
from qkv_tui.core.scenario import builtin_names
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.side_views import SIDE_VIEWS
from qkv_tui.display.status_line import FITS, plain, status_pieces
from qkv_tui.display.view import Explanation
from qkv_tui.teach.stepper import Position

FLAGS = ("3 dp", "3 dp · by hand · what-if", "")


def explanations(name: str) -> list[Explanation]:
    comp = compute(load_scenario(name))
    presenter = Presenter(comp)
    shown = [presenter.frame(Position(run.start, run.head or 0), Modes()).explanation for run in presenter.exact.runs]
    for view in SIDE_VIEWS:  # those the scenario does not list too (the Train view's "no training steps here")
        modes = Modes(view=view.name)
        steps = view.steps(presenter, modes, 0)
        shown += [presenter.frame(Position(0, 0), replace(modes, side_step=s)).explanation
                  for s in sorted({0, steps // 2, steps - 1})]
    return shown


def gaps(line: str) -> list[str]:
    """What is wrong with a line: separators with nothing between them, blank runs, blanks at its ends."""
    wrong = []
    if re.search(r"·\s*·", line):
        wrong.append("two separators")
    if re.search(r"· {2,}| {2,}·", line):
        wrong.append("a separator beside a gap")
    if re.search(r" {4,}", line):
        wrong.append("a blank run")
    if not line.startswith(" ") or line.startswith("  ") or line.endswith(" "):
        wrong.append("blanks at an end")
    if re.search(r"·\s*\[", line) or re.search(r"·\s*$", line):
        wrong.append("a separator with nothing after it")
    return wrong


def test_the_reported_lines_had_gaps() -> None:
    assert gaps(" Train ·    [3 dp]") and gaps("    no tiles ·    [3 dp]")
    assert not gaps(" softmax(QKᵀ/√dₖ)V   3/6 Score · op 31/66 · head 1 (1/2)   [3 dp]")


@pytest.mark.parametrize("name", builtin_names())
def test_no_status_line_has_gaps(name: str) -> None:
    seen = set()
    for ex in explanations(name):
        for flags in FLAGS:
            for fit in FITS:
                line = plain(status_pieces(ex, flags, fit))
                if line not in seen:
                    seen.add(line)
                    assert not gaps(line), (line, gaps(line))
                    assert ex.stage_label in line


def test_an_empty_counter_and_formula_leave_nothing_behind() -> None:
    ex = Explanation(stage_label="no tiles", counter="", head_label="", arithmetic="", details=(), meaning="", formula=())
    assert plain(status_pieces(ex, "3 dp", FITS[0])) == " no tiles   [3 dp]"
    ex = replace(ex, stage_label="Train", formula=(("softmax", True),))
    assert plain(status_pieces(ex, "", FITS[0])) == " softmax   Train"


@pytest.mark.parametrize(("name", "key"), [("learn_to_look", "l"), ("deltanet", "t")])
async def test_the_app_shows_the_views_without_gaps(name: str, key: str) -> None:
    from qkv_tui.ui.app import QKVApp
    from qkv_tui.ui.widgets.panels import FormulaLine

    app = QKVApp(name)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(key)
        line = str(app.query_one(FormulaLine).render())
        assert app.modes.view != "trace" and not gaps(line), line
