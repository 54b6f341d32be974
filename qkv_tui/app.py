"""The step-through app: one reactive position over the trace; every pane is drawn from it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.widgets import Footer, Static

from .engine import Computation, compute
from .scenario import Scenario, load_scenario
from .stepper import Position, Stepper
from .trace import Trace
from .view import PaneSpec, View
from .widgets.matrix import MatrixView
from .widgets.panels import ExplainPanel, FormulaLine, StageBar
from .widgets.screens import GotoScreen, HelpScreen, NotesScreen

MIN_WIDTH, MIN_HEIGHT = 50, 14
OVERVIEW_ROWS, OVERVIEW_SLOTS = 2, 5  # rows of context panes below the focus panes, when there is room
OVERVIEW_MIN_HEIGHT = 6  # a context pane shows at least three rows


class QKVApp(App[None]):
    """softmax(QKᵀ/√dₖ)V, one operation at a time."""

    CSS_PATH = "qkv.tcss"
    TITLE = "qkv-tui"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,space", "next", "next", key_display="→", priority=True),
        Binding("left", "prev", "prev", key_display="←", priority=True),
        Binding("right_square_bracket", "next_stage", "stage", key_display="]", priority=True),
        Binding("left_square_bracket", "prev_stage", "stage", key_display="[", priority=True),
        Binding("home", "first", "first", show=False, priority=True),
        Binding("end", "last", "all", priority=True),
        Binding("tab", "head(1)", "head", priority=True),
        Binding("shift+tab", "head(-1)", "head", show=False, priority=True),
        *(Binding(str(i), f"stage({i})", f"stage {i}", show=False) for i in range(1, 10)),
        Binding("g", "goto", "go to", show=False),
        Binding("n", "notes", "notes"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    position: reactive[Position] = reactive(Position(0, 0), init=False, repaint=False)
    """The current operation and the head in view; the whole screen follows from it."""

    def __init__(self, scenario: Scenario | str | Path = "i_love_ai", computation: Computation | None = None) -> None:
        super().__init__()
        self.scenario = load_scenario(scenario)
        self.comp = computation if computation is not None else compute(self.scenario)
        self.trace = Trace(self.comp)
        self.stepper = Stepper(self.trace)
        self.view = View(self.trace)
        self.decimals = 3
        self.theme = "textual-dark"
        self.set_reactive(QKVApp.position, self.stepper.start())
        self.ready = False  # widgets exist only after mount
        self._placed: dict[str, int] = {}  # height last given to each row of panes
        self._slots: dict[str, list[MatrixView]] = {}  # each row's pane widgets, found once
        self._drawn: tuple[Position, object] | None = None  # (position, size) of the last redraw
        self._ends: tuple[bool, bool] | None = None  # (at first, at last) when the footer was last refreshed


    def compose(self) -> ComposeResult:
        with Vertical(id="main"):
            yield StageBar(id="stagebar")
            yield FormulaLine(id="formula")
            with Horizontal(id="focus"):
                for i in range(max(4, len(self.comp.heads) + 1)):
                    yield MatrixView(id=f"focus-{i}")
            for row in range(OVERVIEW_ROWS):
                with Horizontal(id=f"overview-{row}", classes="overview"):
                    for i in range(OVERVIEW_SLOTS):
                        yield MatrixView(id=f"overview-{row}-{i}")
            yield ExplainPanel(id="explain")
        yield Static("", id="too-small")
        yield Footer()

    def on_mount(self) -> None:
        self.title = self.scenario.title
        self.ready = True
        self.redraw()

    def on_resize(self) -> None:
        if self._drawn != (self.position, self.size):  # the first resize repeats what mount drew
            self.redraw()

    def watch_position(self) -> None:
        self.redraw()
        ends = (self.position.index == 0, self.position.index == self.stepper.last_index)
        if ends != self._ends:  # the footer greys keys out only at the ends; rebuilding it costs a frame
            self._ends = ends
            self.refresh_bindings()

    # --- drawing ------------------------------------------------------------------

    @property
    def too_small(self) -> bool:
        return self.size.width < MIN_WIDTH or self.size.height < MIN_HEIGHT

    def redraw(self) -> None:
        """Make every widget show the current position."""
        if not self.ready:
            return
        self._drawn = (self.position, self.size)
        small = self.too_small
        if self.screen.has_class("-too-small") != small:
            self.screen.set_class(small, "-too-small")
        if small:
            self.query_one("#too-small", Static).update(
                f"terminal too small: need {MIN_WIDTH}×{MIN_HEIGHT}, have {self.size.width}×{self.size.height}"
                "\nenlarge the window, or press q to quit"
            )
            return
        pos = self.position
        focus, extra = self.view.panes(pos, self.decimals, overview=True)
        ex = self.view.explain(pos, self.decimals)
        self.query_one(StageBar).show(self.scenario.title, ex)
        self.query_one(FormulaLine).show(ex)
        description = self.scenario.description if pos.index == 0 else ""
        explain = self.query_one(ExplainPanel)
        explain.show(ex, description)
        # the focus panes come first, then the whole explanation, then context panes in what is left
        avail = self.size.height - 3  # stage bar, formula and footer
        explain_lines = explain.lines_needed(self.size.width)
        focus_budget = max(avail - min(explain_lines, max(6, self.size.height * 2 // 5)), 5)
        room = avail - self._fill("focus", focus, focus_budget) - explain_lines
        # the rest of the head's matrices, in rows below, while there is room for them
        rows = self._rows(extra)
        for i in range(OVERVIEW_ROWS):
            specs = rows[i] if i < len(rows) else []
            if not (specs and room >= min(_height(specs), OVERVIEW_MIN_HEIGHT)):
                specs = []
            room -= self._fill(f"overview-{i}", specs, room)

    def _rows(self, specs: list[PaneSpec]) -> list[list[PaneSpec]]:
        """Overview panes packed into rows at their natural width, in order."""
        rows: list[list[PaneSpec]] = [[]]
        room = self.size.width
        for spec in specs:
            need = _natural_width(spec, titled=False)
            if need > self.size.width:
                continue
            if rows[-1] and (need > room or len(rows[-1]) == OVERVIEW_SLOTS):
                rows.append([])
                room = self.size.width
            rows[-1].append(spec)
            room -= need
        return [row for row in rows if row]

    def _fill(self, group: str, specs: list[PaneSpec], height: int) -> int:
        """Show ``specs`` in a row of pane slots at most ``height`` lines tall; returns the lines used."""
        box = self.query_one(f"#{group}")
        used = min(height, _height(specs))
        # every style change costs a layout pass: touch only what differs from the last frame
        if self._placed.get(group) != used:
            self._placed[group] = used
            box.styles.height = used
            box.display = used > 0
        widths: list[int | str] = list(_share_width(specs, self.size.width))
        if group not in self._slots:
            self._slots[group] = list(box.query(MatrixView))
        for i, view in enumerate(self._slots[group]):
            view.place(widths[i] if i < len(specs) else None)
            if i < len(specs):
                view.show(specs[i])
        return used

    # --- actions --------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        at_start = self.position.index == 0
        at_end = self.position.index == self.stepper.last_index
        if action in ("prev", "prev_stage", "first") and at_start:
            return None
        if action in ("next", "next_stage", "last") and at_end:
            return None
        if action == "head" and self.stepper.head_count == 1:
            return None
        return True

    def action_next(self) -> None:
        self.position = self.stepper.next(self.position)

    def action_prev(self) -> None:
        self.position = self.stepper.prev(self.position)

    def action_next_stage(self) -> None:
        self.position = self.stepper.next_stage(self.position)

    def action_prev_stage(self) -> None:
        self.position = self.stepper.prev_stage(self.position)

    def action_first(self) -> None:
        self.position = self.stepper.first(self.position)

    def action_last(self) -> None:
        self.position = self.stepper.last(self.position)

    def action_head(self, delta: int) -> None:
        self.position = self.stepper.switch_head(self.position, delta)

    def action_stage(self, number: int) -> None:
        self.position = self.stepper.stage(self.position, number)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.trace.stage_keys))

    def action_notes(self) -> None:
        self.push_screen(NotesScreen())

    def action_goto(self) -> None:
        def done(number: int | None) -> None:
            if number is not None:
                self.position = self.stepper.goto(self.position, number - 1)

        self.push_screen(GotoScreen(len(self.trace)), done)


def _height(specs: list[PaneSpec]) -> int:
    """Lines the tallest pane needs: border, header and every row."""
    return max((int(s.values.shape[0]) + 3 for s in specs), default=0)


def _share_width(specs: list[PaneSpec], total: int) -> list[int | str]:
    """Every pane its cells; spare columns complete the shortest-cut titles first; fr shares if even cells don't fit."""
    cells = [_natural_width(s, titled=False) for s in specs]
    spare = total - sum(cells)
    if spare < 0:
        return [f"{w}fr" for w in cells]
    widths: list[int | str] = list(cells)
    wants = sorted((_natural_width(s) - w, i) for i, (s, w) in enumerate(zip(specs, cells)))
    for want, i in wants:
        grant = min(want, spare)
        widths[i] = cells[i] + grant
        spare -= grant
    return widths


def _natural_width(spec: PaneSpec, titled: bool = True) -> int:
    """Columns a pane needs: border, labels and cells, and room for its whole title if ``titled``."""
    return max(spec.content_width, len(spec.title) + 4 if titled else 0) + 2
