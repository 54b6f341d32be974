"""Wide and tall terminals: the context panes use the room (200×60), narrow ones keep the numbers."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.display.layout import natural_width, overview_rows, pack_rows
from qkv_tui.display.modes import Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import OVERVIEW_MIN_HEIGHT, OVERVIEW_ROWS, OVERVIEW_SLOTS, QKVApp
from qkv_tui.ui.widgets.matrix import MatrixView

from .settle import settle


def extra_at_mix(name: str):
    comp = compute(load_scenario(name))
    presenter = Presenter(comp)
    mix = next(r for r in presenter.exact.runs if r.stage == "mix" and r.head == 0)
    return presenter.frame(Position(mix.start, 0), Modes()).extra


def test_a_wide_screen_shows_every_context_pane_with_its_whole_title() -> None:
    extra = extra_at_mix("two_heads")
    assert "output@1" in {s.key for s in extra}  # the other head's output, for Concat
    rows = overview_rows(extra, 200, OVERVIEW_SLOTS, OVERVIEW_ROWS, 40, OVERVIEW_MIN_HEIGHT)
    assert sum(map(len, rows)) == len(extra)
    for row in rows:
        assert sum(natural_width(s) for s in row) <= 200  # every title whole
    assert len(rows[0]) > 5  # more than the five panes a row used to hold


def test_a_narrow_screen_prefers_more_numbers_to_whole_titles() -> None:
    extra = extra_at_mix("i_love_ai")
    titled = pack_rows(extra, 80, OVERVIEW_SLOTS, titled=True)
    rows = overview_rows(extra, 80, OVERVIEW_SLOTS, OVERVIEW_ROWS, 6, OVERVIEW_MIN_HEIGHT)  # room for one row
    assert len(rows) == 1 and len(rows[0]) > len(titled[0])
    roomy = overview_rows(extra, 80, OVERVIEW_SLOTS, OVERVIEW_ROWS, 40, OVERVIEW_MIN_HEIGHT)
    assert roomy == titled[:OVERVIEW_ROWS]  # with room for the rows, titles stay whole


async def test_two_heads_at_200_by_60_leaves_no_context_pane_out() -> None:
    app = QKVApp("two_heads")
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("6")
        await settle(pilot)
        screen = app.presenter.frame(app.position, app.modes)
        shown = [v for v in app.query(MatrixView)
                 if v.display and v.parent is not None and v.parent.display and v.spec is not None]
        assert len(shown) == len(screen.focus) + len(screen.extra)
        for view in shown:
            assert view._title_shown[0] == view.spec.title  # no title cut
