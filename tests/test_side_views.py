"""The side views are a registry (display/side_views.py): each is reachable by its key, named in the
footer, the palette, the help and the screenshots from its one entry, and leaves by its key again."""

from __future__ import annotations

from qkv_tui import compute, load_scenario
from qkv_tui.display.modes import TRACE, Modes
from qkv_tui.display.presenter import Presenter
from qkv_tui.display.side_views import SIDE_VIEWS, side_view
from qkv_tui.teach.stepper import Position
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.panels import FormulaLine
from qkv_tui.ui.widgets.screens import KEYS

from .conftest import ROOT

# the views whose step is a step of their own (the cache's, the tiles'): the heads view's step is the head it
# picks, named in its screenshots, and it keeps out of the footer and the "Next:" line (tests/test_heads_view.py)
# the views every scenario has (the Train view only with [backward]: tests/test_train_view.py)
STEPPED = tuple(view for view in SIDE_VIEWS if view.per_head and view.applies is None)


def test_each_view_is_listed_once_with_its_own_key() -> None:
    names = [view.name for view in SIDE_VIEWS]
    keys = [view.key for view in SIDE_VIEWS]
    assert len(set(names)) == len(names) and TRACE not in names
    assert len(set(keys)) == len(keys)
    assert all(side_view(name) is view for name, view in zip(names, SIDE_VIEWS, strict=True))
    assert side_view(TRACE) is None
    # no side view's key is taken by another of the app's keys, but for c: the cost view's key (contracts §17) is
    # also the cache view's own choice, which acts only inside that view and comes first there
    # (tests/test_cost_view_app.py)
    others = {key for binding in QKVApp.BINDINGS if not binding.action.startswith("side(") and binding.action != "option"
              for key in binding.key.split(",")}
    assert not others & set(keys)


def test_each_view_builds_its_frames_from_the_presenter() -> None:
    presenter = Presenter(compute(load_scenario("i_love_ai")))
    assert presenter.side_steps(Modes(), 0) == 0  # the trace is no side view
    for view in STEPPED:
        modes = Modes(view=view.name)
        steps = presenter.side_steps(modes, 0)
        assert steps > 1 and presenter.side(modes) is view
        last = presenter.frame(Position(0, 0), Modes(view=view.name, side_step=steps + 5))
        shown = view.frame(presenter, modes, steps - 1, 0)
        assert last.explanation == shown.explanation  # a step past the end shows the last
        assert [spec.key for spec in last.focus] == [spec.key for spec in shown.focus]


def test_help_and_closing_summary_name_every_view() -> None:
    rows = [key for key, _ in KEYS]
    for view in SIDE_VIEWS:
        assert all(row in KEYS for row in view.help) and view.key in rows


async def test_every_view_is_reachable_by_its_key_and_named_from_the_registry() -> None:
    app = QKVApp(ROOT / "scenarios" / "i_love_ai.toml")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()  # the footer composes its keys after the first frame
        titles = [command.title for command in app.get_system_commands(app.screen)]
        footer = [str(key.render()).strip() for key in app.screen.query("FooterKey")]
        trace_line = str(app.query_one(FormulaLine).render())
        for view in STEPPED:
            assert view.title in titles and f"{view.key} {view.label}" in footer
            await pilot.press(view.key)
            assert app.modes.view == view.name and app.modes.side_step == 0
            assert app.check_action("row", (1,)) is False  # the trace's own keys rest in a side view, out of its footer
            await pilot.press("right")
            assert app.modes.side_step == 1
            name = app.live.screenshot_name()
            steps = len(str(app.presenter.side_steps(app.modes, 0)))
            assert name == f"i_love_ai-{view.shot(app.modes)}-step{2:0{steps}d}.svg", name
            await pilot.press(view.key)  # its key again: back to the trace, where it was
            assert app.modes.view == TRACE and app.position.index == 0
            command = {c.title: c for c in app.get_system_commands(app.screen)}[view.title]
            command.callback()  # the palette's entry opens it too
            await pilot.pause()
            assert app.modes.view == view.name and str(app.query_one(FormulaLine).render()) != trace_line
            await pilot.press(view.key)


async def test_the_last_operation_points_to_every_view() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("end")
        notes = app.presenter.frame(app.position, app.modes).notes
        line = next(n for n in notes if n.startswith("Next: "))
        for view in (view for view in SIDE_VIEWS if view.closing and view.applies is None):
            assert f"{view.key} {view.closing}" in line
