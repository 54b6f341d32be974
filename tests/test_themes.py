"""The themes' colours come from the stylesheet (qkv.tcss, component classes under :dark and :light):
switching the theme restyles every widget, and no module holds a colour for another to overwrite."""

from __future__ import annotations

from rich.style import Style

from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets import looks, matrix, panels
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine, StageBar


def current_cell_background(app: QKVApp) -> str:
    """The background the current cell is drawn with, read off the pane's drawn line."""
    view = next(v for v in app.query(MatrixView) if v.display and v.spec is not None and v.spec.current is not None)
    row = view.spec.current[0] - int(view.scroll_y) + 1  # line 0 is the column header
    styles = {segment.style.bgcolor.name for segment in view.render_line(row) if segment.style and segment.style.bgcolor}
    marked = [name for name in styles if name in ("#ffd75f", "#f08000")]
    assert len(marked) == 1, styles
    return marked[0]


def colours(line: object) -> set[str]:
    return {span.style.color.name for span in line.spans if isinstance(span.style, Style) and span.style.color}


def test_no_module_keeps_colours_for_a_theme_to_overwrite() -> None:
    for module in (looks, matrix, panels):
        held = [name for name, value in vars(module).items() if isinstance(value, Style)
                or (isinstance(value, dict) and any(isinstance(v, str) and v.startswith("#") for v in value.values()))]
        assert not held, (module.__name__, held)


async def test_switching_the_theme_restyles_from_the_stylesheet() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("right", "right")
        assert app.current_theme.dark and current_cell_background(app) == "#ffd75f"
        dark_formula = colours(app.query_one(FormulaLine).render())
        dark_stages = colours(app.query_one(StageBar).render())
        assert "#8a8a8a" in dark_stages  # the stages still to do
        dark_explain = app.query_one(ExplainPanel).render_line(0)
        app.theme = "textual-light"
        await pilot.pause()
        assert current_cell_background(app) == "#f08000"  # qkv.tcss: MatrixView:light > .matrix--current
        assert "#303030" in colours(app.query_one(FormulaLine).render()) != dark_formula
        assert "#6c6c6c" in colours(app.query_one(StageBar).render()) != dark_stages
        assert app.query_one(ExplainPanel).render_line(0) != dark_explain
        app.theme = "textual-dark"
        await pilot.pause()
        assert current_cell_background(app) == "#ffd75f"
        assert colours(app.query_one(FormulaLine).render()) == dark_formula


async def test_both_themes_draw_pane_frames_that_stand_out_from_the_background() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await pilot.pause()
            for widget in (next(v for v in app.query(MatrixView) if v.display), app.query_one(ExplainPanel)):
                frame = widget.styles.border_top[1]
                ground = widget.background_colors[1]
                # the dark theme's frames differ from their ground by 0.235 in brightness; the light theme's were
                # #FAFAFA on #E0E0E0 (0.10), which a projector washes out
                assert abs(frame.brightness - ground.brightness) > 0.2, (theme, type(widget).__name__, frame, ground)
