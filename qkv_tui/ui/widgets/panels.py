"""The text panels around the matrices: the stage bar, the formula line, the explanation, the footer
and the quiz's answer box."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, cast

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Input, Static
from textual.widgets._footer import FooterKey  # not exported: its compact, set before the key is mounted

from qkv_tui.core.fmt import cell_len
from qkv_tui.display.footer_keys import fit_keys, rank
from qkv_tui.display.stage_bar import SEPARATOR, Bar, fit_bar
from qkv_tui.display.status_line import Piece, fit_status
from qkv_tui.display.text import pictured, wrap
from qkv_tui.display.view import Explanation
from qkv_tui.ui.widgets.looks import Styled
from qkv_tui.ui.widgets.scrolling import SyncedScrollView

if TYPE_CHECKING:  # the quiz's module loads when the quiz first asks, not with the first screen
    from textual.screen import Screen

    from qkv_tui.teach.quiz import Question


class StageBar(Static, Styled):
    """``I love AI · 1 Embed › 2 Project › [3 Score] › …`` with the current stage marked.

    Which stages and how much of the title fit is display/stage_bar.py's rule: the title and the
    current stage are always there."""

    PREFIX = "stagebar"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"stagebar--current", "stagebar--done", "stagebar--todo", "stagebar--muted"}
    _shown: tuple[object, ...] = ()
    _bar: Bar | None = None  # what render() writes

    def render(self) -> Text:
        # built here, not in show(): a new theme repaints the bar, in its colours (qkv.tcss)
        return self._line(self._bar) if self._bar is not None else Text()

    def show(self, title: str, ex: Explanation, width: int) -> None:
        if (title, ex.stages, width) == self._shown:  # it changes only with the stage
            return
        self._shown = (title, ex.stages, width)
        self._bar = fit_bar(pictured(title), ex.stages, width)
        self.refresh()  # its size is fixed by CSS: no layout pass

    def _line(self, bar: Bar) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        muted = self.look("muted")
        if bar.title:
            text.append(f" {bar.title} ", style="bold")
            text.append("  ")
        for i, (label, state) in enumerate(bar.pieces):
            if i:
                text.append(SEPARATOR, style=muted)
            if state == "current":
                text.append(f" {label} ", style=self.look(state))
            else:
                text.append(label, style=self.look(state))
        return text


class FormulaLine(Static, Styled):
    """softmax(QKᵀ/√dₖ)V with the part being computed marked, and where we are.

    What fits a width is display/status_line.py's rule; where we are (stage, operation, layer,
    head) is never cut.
    """

    PREFIX = "formula"
    COMPONENT_CLASSES: ClassVar[set[str]] = {"formula--muted", "formula--formula", "formula--active",
                                             "formula--stage", "formula--head"}
    _pieces: list[Piece] | None = None  # what render() writes

    def render(self) -> Text:
        # built here, not in show(): a new theme repaints the line, in its colours (qkv.tcss)
        text = Text(no_wrap=True, overflow="ellipsis")
        for piece, look in self._pieces or ():
            text.append(piece, style="bold" if look == "bold" else self.look(look) if look else "")
        return text

    def show(self, ex: Explanation, flags: str = "", width: int = 1_000) -> None:
        self._pieces = fit_status(ex, flags, width)
        self.refresh()  # its size is fixed by CSS: no layout pass


class ExplainPanel(SyncedScrollView, Styled, can_focus=False):
    """The current operation's arithmetic with its real numbers, and what the stage means.

    Each line is wrapped at term boundaries (never inside an expression) with a hanging
    indent, and only the screen lines that differ from the last step are redrawn: most of
    the panel (the stage's meaning, the blank rest) stays put. When the terminal is too
    short for all of it, the panel scrolls (mouse wheel, or page up / page down).
    """

    PREFIX = "explain"
    KINDS = ("arithmetic", "detail", "note", "meaning", "description")  # each logical line is one
    COMPONENT_CLASSES: ClassVar[set[str]] = {f"explain--{kind}" for kind in KINDS}

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: tuple[tuple[str, str], ...] = ()  # (text, one of KINDS) of each logical line
        self._strips: list[Strip] = []
        # the current text's lines, wrapped at a width in the theme's styles (a new theme wraps again)
        self._wrapped: tuple[tuple[int, tuple[Style, ...]] | None, list[Strip]] = (None, [])
        self._pass_style: Style | None = None  # the panel's style during one pass over its lines (render_lines)

    def _wrap(self, width: int) -> list[Strip]:
        looks = {kind: self.look(kind) for kind in self.KINDS}  # kept until the styles change (looks.py)
        key = (width, tuple(looks.values()))
        if self._wrapped[0] != key:
            strips = []
            for text, kind in self._lines:
                rich = looks[kind]
                prose = kind in ("meaning", "description")  # sentences, not arithmetic
                strips += [Strip([Segment(line, rich)]) for line in wrap(text, width, prose=prose)]
            self._wrapped = (key, strips)
        return self._wrapped[1]

    @property
    def plain(self) -> str:
        """The panel's text without styles, one logical line per line (not wrapped)."""
        return "\n".join(text for text, _ in self._lines)

    def lines_needed(self, width: int) -> int:
        """Screen lines this panel takes at a terminal width: its wrapped text and the top border."""
        return len(self._wrap(max(width - 2, 1))) + 1  # padding on the left, the scrollbar's gutter on the right

    def expect(self, width: int) -> None:
        """Before the panel's first layout: its content's size at the terminal ``width`` (the lines lines_needed
        counts), so that layout decides its scrollbars and draws its lines once; sized only at its first resize, it
        was laid out and drawn again."""
        if not self.scrollable_content_region.width and not self.virtual_size:
            inner = max(width - 2, 1)
            self.virtual_size = Size(inner, len(self._wrap(inner)))

    def show(self, ex: Explanation, description: str = "", notes: tuple[str, ...] = (), prose: bool = True) -> None:
        """``prose``: False leaves out what the stage means (f, display/presenting.py): the working stays."""
        # every line is the scenario's words too (labels, names): no control character may break it
        lines = [(pictured(ex.arithmetic), "arithmetic")]
        lines += [(pictured(line), "detail") for line in ex.details]
        lines += [(pictured(line), "note") for line in notes]
        if prose:
            lines.append((pictured(ex.meaning), "meaning"))
        # a description's own line breaks are the author's layout: keep them, and only them
        lines += [(pictured(line), "description") for line in description.split("\n") if description]
        if tuple(lines) == self._lines:
            return
        self._lines = tuple(lines)
        self._wrapped = (None, [])
        if self.scroll_y:
            self.scroll_to(y=0, animate=False, immediate=True)  # a new operation reads from its first line
        self._redraw_changed()

    def on_resize(self) -> None:
        self._redraw_changed()

    def _redraw_changed(self) -> None:
        width = self.scrollable_content_region.width
        if not width:  # not laid out yet: render_line wraps at the real width
            self.refresh()
            return
        new = self._wrap(width)
        old, self._strips = self._strips, new
        size = Size(width, len(new))
        if size != self.virtual_size:
            self.set_virtual_size(size)
            self.refresh()
            return
        top = int(self.scroll_y)
        for y in range(max(len(old), len(new))):
            if (y >= len(old) or y >= len(new) or old[y] != new[y]) and 0 <= y - top < self.size.height:
                self.refresh(Region(0, y - top, width, 1))

    def render_lines(self, crop: Region) -> list[Strip]:
        # rich_style walks every ancestor's styles: once for the lines of one pass, in which nothing restyles
        self._pass_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_style = None

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        self._strips = self._wrap(width)  # the same lines, unless laid out at a new width or in a new theme
        row = y + int(self.scroll_y)
        strip = self._strips[row] if row < len(self._strips) else Strip.blank(width)
        style = self.rich_style if self._pass_style is None else self._pass_style
        return strip.apply_style(style).crop_extend(0, width, style)


class _Key(Protocol):
    """What a footer key says: the action it runs, its key as shown, and what it does."""

    action: str
    key_display: str
    description: str


class KeyFooter(Footer):
    """Textual's footer, narrowed a whole key at a time: no key is ever cut mid-word.

    Keys that do not fit the width are left out, the least needed first (``keep`` names the
    actions from most to least needed; the rest go before them, last first). The keys shown
    stand in the order of ``order`` (others after them, as Textual lists them), so focusing
    the quiz's answer box does not shuffle them. Under a modal screen it shows nothing: the
    modal's own footer, with the keys that work there, covers it.
    """

    def __init__(self, keep: Sequence[str] = (), order: Sequence[str] = (), *, id: str | None = None,
                 show_command_palette: bool = True, compact: bool = False) -> None:
        super().__init__(id=id, show_command_palette=show_command_palette, compact=compact)
        self.keep = tuple(keep)
        self.order = tuple(order)
        self._fitted = -1  # the width the shown keys were chosen for
        self.left_out: frozenset[str] = frozenset()  # the actions of the keys the width had no room for
        self._early: tuple[object, ...] | None = None  # the bindings the keys made before the app's mount show

    def compose(self) -> ComposeResult:
        if self.screen is not self.app.screen:  # a modal is on top: its keys are not ours
            self.left_out = frozenset()
            return
        as_mounted = getattr(self.app, "keys_as_mounted", None)
        if not getattr(self.app, "ready", True):
            if as_mounted is None or not getattr(self.app, "starting", False) or self.app.is_web:
                # quitting: no keys. Served (a browser's tab, forked from --serve's app starter): made early, the
                # keys cost each app's start more than the layouts they save (benchmarks/serve_cost.py: the last of
                # thirty 6.0x a bare start-up, not 4.5x); the mount's refresh of the bindings makes them
                self._fitted = self.size.width or self.app.size.width  # and its first resize has nothing to redo
                return
            # Before the app's mount: the keys its mount turns on, made now. The mount's refresh of the bindings
            # then finds them made (bindings_changed), where Textual's footer composes empty and again after the
            # first frame, which laid the screen out a second and a third time (the keys mounted, then sized).
            self._bindings_ready = True  # else Textual's compose makes no key before its first bindings_changed
            with as_mounted():
                widgets = list(self._keys())
                self._early = self._shown()
            yield from widgets
            return
        yield from self._keys()

    def _shown(self) -> tuple[object, ...]:
        """What compose reads of the screen's bindings: each shown key, whether it acts, its tooltip."""
        return tuple((binding, enabled, tooltip)
                     for (_, binding, enabled, tooltip) in self.screen.active_bindings.values() if binding.show)

    def bindings_changed(self, screen: Screen[object]) -> None:
        early, self._early = self._early, None
        if early is not None and screen is self.screen and self._shown() == early:
            self._bindings_ready = True  # the keys composed before the mount are these: nothing to make again
            return
        super().bindings_changed(screen)

    def _keys(self) -> Iterator[Widget]:
        """Textual's keys (its compose), those the width has room for in ``order``, then the palette's key."""
        width = self.size.width or self.app.size.width
        self._fitted = width
        widgets = list(super().compose())
        # the footer's keys carry their action, key and description (Textual's FooterKey, not exported)
        keys = [w for w in widgets if hasattr(w, "action") and not w.has_class("-command-palette")]
        for key in keys:
            if isinstance(key, FooterKey):
                # born compact (its default), each key bound to the footer's compact would take the class, be
                # restyled, then lose it when the binding sets the footer's value, and be restyled again: two
                # restyles a key on the way to every first frame. Given that value now, the binding changes
                # nothing. (The palette's key is not bound: it keeps Textual's default.)
                key.set_reactive(FooterKey.compact, self.compact)
        room = width - sum(self.key_width(w) + 2 for w in widgets if w.has_class("-command-palette"))  # its border

        calls = [cast(_Key, key).action for key in keys]
        fits = fit_keys(calls, [self.key_width(key) for key in keys], self.keep, room)
        shown = [key for key, fit in zip(keys, fits) if fit]
        self.left_out = frozenset(call for call, fit in zip(calls, fits) if not fit)
        yield from sorted(shown, key=lambda k: rank(self.order, cast(_Key, k).action, keys.index(k)))
        yield from (w for w in widgets if w not in keys)  # the palette key, docked on the right

    def key_width(self, widget: Widget) -> int:
        """Cells a key takes: its key, its description and the padding or margin between keys."""
        key = cast(_Key, widget)
        words = cell_len(key.key_display) + (cell_len(key.description) + 1 if key.description else 0)
        return words + (1 if self.compact else 2)

    def watch_compact(self) -> None:
        if self.is_mounted:
            self.refresh(recompose=True)

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._fitted:
            self.refresh(recompose=True)


class QuizInput(Input):
    """The quiz's answer box. It takes a key only while the text can still become an answer
    (digits, a point, a minus, ``-inf``; for "which key?" a key's number or the start of its
    name), so every other key does what it does elsewhere: p leaves the quiz, ] moves on a stage,
    k opens the cache view, ? the help.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.reveal", "reveal", key_display="esc"),
        Binding("p", "app.quiz", "leave"),
    ]

    question: Question | None = None
    """What is being asked; None: the box takes nothing."""

    def check_consume_key(self, key: str, character: str | None) -> bool:
        if character is None or not character.isprintable() or self.question is None:
            return False
        at = self.cursor_position
        return self.question.could_be(self.value[:at] + character + self.value[at:])

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and not self.check_consume_key(event.key, event.character):
            event.prevent_default()  # not typed: the key goes on to the app's bindings

    def on_input_changed(self) -> None:
        self.app.refresh_bindings()  # what the box takes next changed: the footer shows the keys that act
