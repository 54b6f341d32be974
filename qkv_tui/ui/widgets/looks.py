"""Styled: a widget whose text styles are component classes (qkv.tcss), each looked up once until its styles change.

Textual (8.2) keeps a widget's component styles in a cache that every refresh of the widget empties, and a step
refreshes every pane: each lookup then walked the widget's styles and its ancestors' again, about 25 a keypress
(benchmarks/bench.py --step-only). The looks here are kept until Textual applies the stylesheet to the widget anew
(notify_style_update, as for a new theme or a CSS reload) or the theme changes (theme_changed_signal). That is all
that can change them as long as qkv.tcss styles a component class by the widget's type and ``:dark``/``:light``
alone, which tests/test_looks.py holds it to: a rule keyed on an ancestor's class could change a component's
styles while the widget's own stay the same, and Textual does not call notify_style_update then.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from textual.theme import Theme
from textual.widget import Widget


class Styled(Widget):
    """A widget whose text styles are component classes, styled per theme in qkv.tcss: ``look("muted")``
    is the rules of ``.PREFIX--muted`` alone (to add to the text's own)."""

    PREFIX: ClassVar[str] = ""
    _looks: dict[str, Style] | None = None  # by component name, from the first lookup of a running widget on

    def look(self, name: str) -> Style:
        looks = self._looks
        if looks is None:
            if not self.is_running:  # not mounted yet: nothing would tell it of a new theme
                return self._lookup(name)
            self.app.theme_changed_signal.subscribe(self, self._theme_changed, immediate=True)
            looks = self._looks = {}
        style = looks.get(name)
        if style is None:
            style = looks[name] = self._lookup(name)
        return style

    def _lookup(self, name: str) -> Style:
        return self.get_component_rich_style(f"{self.PREFIX}--{name}", partial=True)

    def notify_style_update(self) -> None:
        if self._looks:
            self._looks.clear()
        super().notify_style_update()

    def _theme_changed(self, theme: Theme) -> None:
        # Textual has re-applied the stylesheet by now (refresh_css comes before the signal): forget what was
        # looked up before, and draw again in the new looks
        self.notify_style_update()
        self.refresh()
