"""ui/shared_css.py: an app whose CSS was parsed and matched by an app before it (as every app --serve forks
from the app starter) styles every widget exactly as Textual's own Stylesheet does, and parses and matches
nothing on its way to the first frame."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.css.stylesheet import Stylesheet

from qkv_tui.edges.serve.zygote import first_frame  # the app starter's own warm-up
from qkv_tui.ui import shared_css
from qkv_tui.ui.app import QKVApp
from qkv_tui.ui.shared_css import SharedStylesheet

Styles = dict[str, Any]


def rules_of(styles: Any) -> dict[str, str]:
    """A node's rules by name, as text: a layout is an object of its own in each parse, equal only to itself."""
    return {name: repr(value) for name, value in styles.base.get_rules().items()}


def every_style(app: QKVApp) -> dict[tuple[str, str | None, int], Styles]:
    """Each node's rules and its component classes' rules, by (type, id, place among its type)."""
    seen: dict[tuple[str, str | None], int] = {}
    found: dict[tuple[str, str | None, int], Styles] = {}
    for screen in app.screen_stack:
        for node in screen.walk_children(with_self=True):
            name = (type(node).__name__, node.id)
            seen[name] = seen.get(name, -1) + 1
            rules: Styles = rules_of(node.styles)
            for component, styles in sorted(node._component_styles.items()):
                rules[f"component {component}"] = rules_of(styles)
            found[(*name, seen[name])] = rules
    return found


async def walk(app: QKVApp) -> list[dict[tuple[str, str | None, int], Styles]]:
    """The styles at the screens a student sees first: mounted, blurred and focused, a few stages, a theme."""
    snapshots = []
    async with app.run_test(size=(120, 40), tooltips=True, notifications=True) as pilot:
        await pilot.pause()
        snapshots.append(every_style(app))
        for change in (events.AppBlur(), events.AppFocus()):
            app.post_message(change)
            await pilot.pause()
            snapshots.append(every_style(app))
        for keys in (("3", "right"), ("5", "right", "right"), ("question_mark",), ("escape", "k"), ("k", "t")):
            await pilot.press(*keys)
            await pilot.pause()
            snapshots.append(every_style(app))
        app.theme = "textual-light"
        await pilot.pause()
        snapshots.append(every_style(app))
    return snapshots


def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual's own Stylesheet, as QKVApp had before."""
    monkeypatch.setattr(SharedStylesheet, "like", classmethod(lambda _cls, stylesheet: stylesheet))


async def test_shared_styles_are_textuals_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_css, "PARSED", {})
    monkeypatch.setattr(shared_css, "STYLED", {})
    first = await walk(QKVApp("i_love_ai"))  # fills the memo, as the app starter's warm-up does
    second = await walk(QKVApp("i_love_ai"))  # finds it filled, as every forked app does
    with monkeypatch.context() as textual:
        plain(textual)
        own = await walk(QKVApp("i_love_ai"))
    assert len(own) == len(first) == len(second) == 9
    for step, (expected, a, b) in enumerate(zip(own, first, second, strict=True)):
        assert a == expected, step
        assert b == expected, step


async def test_an_app_after_the_first_parses_and_matches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_css, "PARSED", {})
    monkeypatch.setattr(shared_css, "STYLED", {})
    parsed: list[str] = []
    matched: list[str] = []
    parse_rules, apply = Stylesheet._parse_rules, Stylesheet.apply

    def counted_parse(self: Stylesheet, css: str, read_from: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(str(read_from))
        return parse_rules(self, css, read_from, *args, **kwargs)

    def counted_apply(self: Stylesheet, node: Any, **kwargs: Any) -> None:
        matched.append(type(node).__name__)
        apply(self, node, **kwargs)

    monkeypatch.setattr(Stylesheet, "_parse_rules", counted_parse)
    monkeypatch.setattr(Stylesheet, "apply", counted_apply)

    await first_frame()
    assert parsed and matched
    parsed.clear()
    matched.clear()
    await first_frame()
    assert parsed == []
    # Textual's own matching runs only for panes alike in all but their id, from its cache within one pass
    assert set(matched) <= {"Horizontal", "MatrixView"}, matched


def test_a_stylesheet_with_errors_is_reported_by_every_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_css, "PARSED", {})
    for _ in range(2):
        sheet = SharedStylesheet()
        sheet.add_source("Static { color: not-a-colour; }", ("test", "bad"))
        with pytest.raises(Exception, match=r"(?i)error"):
            sheet.parse()
    assert shared_css.PARSED == {}


def test_the_parsed_rules_hold_the_themes_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_css, "PARSED", {})
    colours = []
    for value in ("red", "blue", "red"):
        sheet = SharedStylesheet(variables={"accent": value})
        sheet.add_source("Static { color: $accent; }", ("test", "accent"))
        colours.append(sheet.rules[0].styles.color)
    assert colours[0] == colours[2] != colours[1]
    assert len(shared_css.PARSED) == 2


async def test_the_apps_focus_and_blur_restyle_nothing_no_rule_can_see(monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual restyles every widget when the app takes or loses focus (a tab's app does both before its first
    frame); no rule of this app asks the app's :focus or :blur, so that pass is skipped (the styles stay Textual's
    own: test_shared_styles_are_textuals_own walks through both)."""
    matched: list[str] = []
    inside: list[bool] = []
    apply, watch = SharedStylesheet.apply, QKVApp._watch_app_focus

    def counted_apply(self: SharedStylesheet, node: Any, **kwargs: Any) -> None:
        if inside:
            matched.append(type(node).__name__)
        apply(self, node, **kwargs)

    def watched(self: QKVApp, focus: bool) -> None:  # the pass itself, not what the focus change goes on to do
        inside.append(True)
        try:
            watch(self, focus)
        finally:
            inside.clear()

    monkeypatch.setattr(SharedStylesheet, "apply", counted_apply)
    monkeypatch.setattr(QKVApp, "_watch_app_focus", watched)
    app = QKVApp("i_love_ai")
    async with app.run_test(size=(120, 40), tooltips=True, notifications=True) as pilot:
        await pilot.pause()
        for change in (events.AppBlur(), events.AppFocus()):
            matched.clear()
            app.post_message(change)
            await pilot.pause()
            assert matched == [], change
        assert not app.stylesheet.app_focus_pass


@pytest.mark.parametrize(("css", "sees"), [
    ("App:blur Static { color: red; }", True),  # as Textual's own App:blur HeaderTitle
    ("App:focus > Screen Static { color: red; }", True),
    ("App:blur ScrollBar { color: red; }", True),  # through the scrollbars of a scrollable widget
    ("Static:focus { color: red; }", False),  # the widget's own focus restyles it on its own
    ("App:blur Input { color: red; }", False),
])
def test_a_rule_asking_the_apps_focus_keeps_the_pass(monkeypatch: pytest.MonkeyPatch, css: str, sees: bool) -> None:
    from textual.widgets import Static

    monkeypatch.setattr(shared_css, "STYLED", {})
    sheet = SharedStylesheet()
    sheet.add_source(css, ("test", "focus"))
    sheet.parse()
    seen = sheet._sees_app_focus(Static())
    if "ScrollBar" in css:  # a scrollable widget's scrollbars, which are matched by their type names only
        seen = sheet._bars_see_app_focus(sheet._current_memo())
    assert seen is sees
