"""The widgets' looks (ui/widgets/looks.py) are kept between steps, and never outlive the styles they came from:
a new theme recolours every one of them, the way a fresh lookup in the stylesheet would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.style import Style

from qkv_tui.ui import shared_css
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.widgets.looks import Styled
from qkv_tui.ui.widgets.matrix import MatrixView
from qkv_tui.ui.widgets.panels import ExplainPanel, FormulaLine, StageBar

STYLED = (MatrixView, StageBar, FormulaLine, ExplainPanel)
TCSS = Path(__file__).resolve().parent.parent / "qkv_tui" / "ui" / "qkv.tcss"


def styled(app: QKVApp) -> list[Styled]:
    return [w for w in app.screen_stack[0].walk_children(Styled) if isinstance(w, Styled)]


Looks = dict[tuple[str, str | None, str], Style]  # by (widget class, widget id, component name)


def kept_and_fresh(app: QKVApp) -> tuple[Looks, Looks]:
    """Every widget's every look, as kept (look) and as the stylesheet says now (a lookup of its own)."""
    kept: Looks = {}
    fresh: Looks = {}
    for widget in styled(app):
        for component in sorted(widget.COMPONENT_CLASSES):
            name = component.removeprefix(f"{widget.PREFIX}--")
            key = (type(widget).__name__, widget.id, name)
            kept[key] = widget.look(name)
            fresh[key] = widget.get_component_styles(component).partial_rich_style
    return kept, fresh


async def test_a_new_theme_recolours_every_look_and_none_goes_stale() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("right", "right")
        seen = {}
        for theme in ("textual-light", "textual-dark", "textual-light", "textual-dark"):
            kept, fresh = kept_and_fresh(app)
            assert kept == fresh
            seen[app.theme] = kept
            app.theme = theme
            await pilot.pause()
            await pilot.press("right")  # a step draws in the new looks, and keeps them
        kept, fresh = kept_and_fresh(app)
        assert kept == fresh == seen["textual-dark"]
        assert {cls for cls, _, _ in kept} == {cls.__name__ for cls in STYLED}
        changed = {(cls, name) for cls, id_, name in kept if seen["textual-light"][cls, id_, name] != kept[cls, id_, name]}
        assert {("MatrixView", "current"), ("FormulaLine", "active"), ("StageBar", "current"),
                ("ExplainPanel", "arithmetic")} <= changed


async def test_a_theme_changed_under_a_modal_recolours_the_trace_behind_it() -> None:
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("right")
        dark = kept_and_fresh(app)[0]
        await pilot.press("question_mark")  # help, on top of the trace
        assert app.screen is not app.screen_stack[0]
        app.theme = "textual-light"
        await pilot.pause()
        await pilot.press("escape")
        assert app.screen is app.screen_stack[0]
        kept, fresh = kept_and_fresh(app)
        assert kept == fresh != dark


@pytest.mark.parametrize("reload", ["file", "refresh_css"])
async def test_a_reloaded_stylesheet_restyles_the_kept_looks(reload: str) -> None:
    """A CSS file edited under ``textual run --dev`` (App._on_css_change updates the nodes), or the styles
    refreshed as a new ANSI theme or screen mode does (App.refresh_css, animated)."""
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("right", "right")
        view = next(v for v in app.query(MatrixView) if v.display)
        assert view.look("current").bgcolor.name == "#ffd75f"
        app.stylesheet.add_source("MatrixView:dark > .matrix--current { background: #ff0000; }", read_from=("test", ""))
        if reload == "file":
            app.stylesheet.reparse()
            app.stylesheet.update(app)
        else:
            app.refresh_css()
        await pilot.pause()
        assert view.look("current").bgcolor.name == "#ff0000"
        kept, fresh = kept_and_fresh(app)
        assert kept == fresh


async def test_steps_look_up_no_style_once_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost the looks are kept for: a lookup walks the widget's styles and its ancestors' again."""
    lookups: list[str] = []
    lookup = Styled.get_component_rich_style

    def counted(self: Styled, *names: str, **kwargs: object) -> Style:
        lookups.extend(names)
        return lookup(self, *names, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Styled, "get_component_rich_style", counted)
    monkeypatch.setattr(shared_css, "STYLED", {})  # as in a fresh process: no app drew before this one
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40)) as pilot:
        for stage in "123456":  # every stage once, so each highlight has been drawn
            await pilot.press(stage, "right", "right")
        assert lookups
        lookups.clear()
        for stage in "123456":
            await pilot.press(stage, "right", "right", "left")
        assert lookups == []


def test_the_stylesheet_styles_component_classes_by_widget_and_theme_only() -> None:
    """What lets looks.py keep them: Textual tells a widget of new styles when its own change or the theme does.
    A rule keyed on an ancestor's class (``.-quiz MatrixView > .matrix--current``) would restyle a component
    while the widget's own styles stay the same, and the widget would keep the old look."""
    prefixes = {cls.PREFIX: cls.__name__ for cls in STYLED}
    text = re.sub(r"/\*.*?\*/", "", TCSS.read_text(encoding="utf-8"), flags=re.S)
    selectors = [s.strip() for block in text.split("}") if "{" in block for s in block.split("{")[0].split(",")]
    named = [s for s in selectors if re.search(rf"\.({'|'.join(prefixes)})--", s)]
    assert len(named) > 30, named
    for selector in named:
        match = re.fullmatch(r"(\w+)(:dark|:light)? > \.(\w+)--[\w-]+", selector)
        assert match and prefixes.get(match[3]) == match[1], selector
