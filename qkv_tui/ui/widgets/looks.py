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
from textual.css.styles import RenderStyles
from textual.theme import Theme
from textual.widget import Widget

from qkv_tui.ui.shared_css import looks_of


class Styled(Widget):
    """A widget whose text styles are component classes, styled per theme in qkv.tcss: ``look("muted")``
    is the rules of ``.PREFIX--muted`` alone (to add to the text's own)."""

    PREFIX: ClassVar[str] = ""
    # Every instance of the type looks alike (the rule above, which tests/test_looks.py holds): Textual styles
    # one virtual node per component class for each instance, most of a pane's share of a first frame; with
    # this set, only one instance (its "probe", the first attached) is styled, and the others look it up there
    SHARED_LOOKS: ClassVar[bool] = False
    _looks: dict[str, Style] | None = None  # by component name, from the first lookup of a running widget on

    def _get_component_classes(self) -> frozenset[str]:  # type: ignore[override]  # Textual's is a classmethod
        if self.SHARED_LOOKS and self._probe() is not self:
            return frozenset()
        return super()._get_component_classes()

    def _probe(self) -> Styled:
        """The instance of this type whose component classes are styled (the first one attached, while it is)."""
        probes: dict[type, Styled] = self.app.__dict__.setdefault("_styled_probes", {})
        probe = probes.get(type(self))
        if probe is None or not probe.is_attached:
            probes[type(self)] = probe = self
        return probe

    def look(self, name: str) -> Style:
        looks = self._looks
        if looks is None:
            if not self.is_running:  # not mounted yet: nothing would tell it of a new theme
                return self._lookup(name)
            self.app.theme_changed_signal.subscribe(self, self._theme_changed, immediate=True)
            looks = self._looks = {}
        style = looks.get(name)
        if style is None:
            style = looks[name] = self._shared_lookup(name)
        return style

    def _shared_lookup(self, name: str) -> Style:
        # A look is the type's, by the rule above, under the stylesheet's current rules (which hold the theme):
        # kept with those rules, it is looked up once per process (once for every app --serve forks)
        shared = looks_of(self.app.stylesheet)
        if shared is None:
            return self._lookup(name)
        key = (type(self), name, self.app.theme)
        style = shared.get(key)
        if style is None:
            style = shared[key] = self._lookup(name)
        return style

    def _lookup(self, name: str) -> Style:
        return self.get_component_rich_style(f"{self.PREFIX}--{name}", partial=True)

    def get_component_styles(self, *names: str) -> RenderStyles:
        if not (self.SHARED_LOOKS and self.is_attached):
            return super().get_component_styles(*names)
        probe = self._probe()
        if probe is not self:
            return probe.get_component_styles(*names)
        try:
            return super().get_component_styles(*names)
        except KeyError:  # the probe before this one was removed, after this one's styling: styled now, once
            self.app.stylesheet.apply(self)
            return super().get_component_styles(*names)

    def notify_style_update(self) -> None:
        if self._looks:
            self._looks.clear()
        super().notify_style_update()

    def _theme_changed(self, theme: Theme) -> None:
        # Textual has re-applied the stylesheet by now (refresh_css comes before the signal): forget what was
        # looked up before, and draw again in the new looks
        self.notify_style_update()
        self.refresh()
